package proctest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// buildTimeout bounds one go build: on two loaded cores a cold one, which
// compiles the dependencies, takes minutes.
const buildTimeout = 5 * time.Minute

// Build starts building the Go package pkg (an import path) and returns a
// function that waits for the build and gives the binary, in the test's
// temporary folder, so that a test can do other slow things meanwhile.
//
// The build goes to this module's folder of the cache (CacheDir), where
// go build leaves a binary that is up to date as it is: linking the worker
// or the API takes seconds of CPU, and the tests of several packages start
// each of them in one test after another. The test gets a link or a copy
// of it, which a later build there (of changed code) does not touch.
func Build(t testing.TB, pkg string) (wait func() string) {
	t.Helper()
	return BuildTo(t, pkg, filepath.Join(t.TempDir(), filepath.Base(pkg)))
}

// BuildTo is Build with the binary at bin, a file that does not exist
// yet.
func BuildTo(t testing.TB, pkg, bin string) (wait func() string) {
	t.Helper()
	module := ModuleDir(t)
	sum := sha256.Sum256([]byte(module))
	cached := filepath.Join(CacheDir(t, "bin"), filepath.Base(module)+"-"+hex.EncodeToString(sum[:6]), filepath.FromSlash(pkg))
	require.NoError(t, os.MkdirAll(filepath.Dir(cached), 0o755))
	built := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		built <- Locked(cached+".lock", func() error {
			out, err := exec.CommandContext(ctx, "go", "build", "-o", cached, pkg).CombinedOutput()
			if err != nil {
				return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
			}
			return LinkOrCopy(cached, bin)
		})
	}()
	result := sync.OnceValue(func() error { return <-built })
	t.Cleanup(func() { _ = result() }) // the build writes into a folder cleanup removes
	return func() string {
		t.Helper()
		require.NoError(t, result())
		return bin
	}
}

// CacheDir is the folder name of the tests' cache, made when missing:
// tollgate-test/name in the user's cache folder (~/.cache on Linux), or in
// the temporary folder when there is none. What the tests keep there is
// built again when missing, so it may be deleted at any time.
func CacheDir(t testing.TB, name string) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "tollgate-test", name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// Locked runs fn holding an exclusive lock on the file path (made when
// missing), which Locked in other processes waits for: two test processes
// that build into the same folder of the cache take turns.
func Locked(path string, fn func() error) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer f.Close() // which releases the lock
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	return fn()
}

// LinkOrCopy makes dst (a new file) the binary src: a hard link where both
// are on one file system, else a copy. go build replaces a binary it
// rebuilds with a new file, so a link keeps what it was.
func LinkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}
