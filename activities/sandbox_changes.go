package activities

// What a sandboxed command changed, read from the overlay's upper layer
// once the command has ended: a file or symbolic link there is one the
// command added or changed (the overlay copies a file up whole before a
// change, and its parent folders with it); a whiteout (a character device
// 0/0) is a file or folder it deleted; a folder marked opaque (the
// user.overlay.opaque attribute, "y") is one it deleted and made again,
// whose files in the workspace are all deleted but those it made again.
// The workspace is read for what each path held when the command ran:
// its Before hash, and the old text a diff is made from.
//
// Names come from the upper layer's folders, one at a time: a name holds no
// slash and is never "..", and every file is opened through an os.Root of
// the upper layer or of the workspace, whose folders on the way are checked
// to be folders, so that no symbolic link leads a read elsewhere. A named
// pipe or a device is never opened: only regular files are read, opened
// without blocking and checked to be the file that was looked at.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// Bounds of what a sandboxed run carries back. Its changes go to the
// person who decides and into the turn's history (or its payload store),
// from where an approve applies them; past a bound the run says it is
// TooLarge, lists what it read so far without content, and cannot be
// applied.
const (
	// maxSandboxFiles bounds the changes of a run: a command that makes
	// more (an npm install, a build's output) is a command to run for
	// real, not one to read file by file.
	maxSandboxFiles = 2000
	// maxSandboxBytes bounds the content and diffs of all the changes, as
	// a tool reads a file whole at most (maxFileBytes).
	maxSandboxBytes = 16 << 20
	// maxSandboxHashed bounds what is read of the workspace to hash the
	// files changed or deleted (their Before): a command that deletes a
	// folder of large files is not read whole.
	maxSandboxHashed = 256 << 20
	// maxSandboxDepth bounds how deep in folders a change may lie: each
	// path is opened from the top (os.Root), so reading a tree costs its
	// depth squared, and a command's 10,000 nested folders would hold the
	// activity for minutes.
	maxSandboxDepth = 256
	// maxSandboxDiff bounds one file's diff, whose lines diffLines already
	// bounds in number but not in length.
	maxSandboxDiff = 64 << 10
)

// changedDuringRun is the Before of a file of the workspace that changed
// while the command ran (its ctime is after the run began): the command
// may have read it, and based what it wrote on it, as it was before, so
// its change must not replace or delete the new one. No file's identity
// is this, so an apply refuses the change.
const changedDuringRun = "(changed in the workspace while the command ran)"

// clockSlack is how far the run's start is taken back to compare it with
// a file's ctime, which the kernel takes from a clock that may lag by a
// tick (at most 10 ms): a change made just before the run is counted as
// made during it, and its apply refused, rather than the other way.
const clockSlack = 20 * time.Millisecond

// opaqueXattr marks a folder of the upper layer whose lower folder the
// overlay hides (with the userxattr mount option).
const opaqueXattr = "user.overlay.opaque"

// errStopReading ends the reading of changes once there are too many.
var errStopReading = errors.New("too many changes")

// sandboxChanges are what readChanges found.
type sandboxChanges struct {
	changes  []protocol.FileChange
	omitted  []string
	tooLarge string
}

// changeReader reads the changes of one run.
type changeReader struct {
	sandboxChanges
	upperDir     string
	upper, lower *os.Root
	started      time.Time // when the run began
	bytes        int64     // content and diffs carried
	hashed       int64     // workspace bytes read for Before
}

// readChanges reads what a command changed from the overlay's upper layer
// upperDir, over the workspace ws, in a run that began at started.
func readChanges(upperDir, ws string, started time.Time) (sandboxChanges, error) {
	upper, err := os.OpenRoot(upperDir)
	if err != nil {
		return sandboxChanges{}, err
	}
	defer upper.Close()
	lower, err := os.OpenRoot(ws)
	if err != nil {
		return sandboxChanges{}, err
	}
	defer lower.Close()
	r := &changeReader{upperDir: upperDir, upper: upper, lower: lower, started: started}
	if _, err := r.dir(".", true); err != nil && !errors.Is(err, errStopReading) {
		return sandboxChanges{}, err
	}
	if r.tooLarge != "" {
		for i := range r.changes {
			r.changes[i].Content, r.changes[i].Diff = nil, ""
		}
		return r.sandboxChanges, nil
	}
	r.pairRenames()
	return r.sandboxChanges, nil
}

// dir reads the changes in the upper layer's folder rel, whose workspace
// folder exists when lowerDir, and reports whether it is empty.
func (r *changeReader) dir(rel string, lowerDir bool) (empty bool, err error) {
	if err := r.depth(rel); err != nil {
		return false, err
	}
	names, err := r.names(r.upper, rel, true)
	if err != nil {
		return false, err
	}
	for _, name := range names {
		if err := r.entry(path.Join(rel, name), lowerDir); err != nil {
			return false, err
		}
	}
	if lowerDir && rel != "." && r.opaque(rel) {
		// Made again: what the workspace has here and the upper layer does
		// not was deleted.
		lowerNames, err := r.names(r.lower, rel, false)
		if err != nil {
			return false, err
		}
		for _, name := range lowerNames {
			if _, found := slices.BinarySearch(names, name); found {
				continue
			}
			p := path.Join(rel, name)
			info, err := r.lower.Lstat(p)
			if err != nil {
				return false, err
			}
			if err := r.deleted(p, info); err != nil {
				return false, err
			}
		}
	}
	return len(names) == 0, nil
}

// entry reads the change at p, an entry of the upper layer, whose
// workspace folder exists when lowerDir.
func (r *changeReader) entry(p string, lowerDir bool) error {
	upper, err := r.upper.Lstat(p)
	if err != nil {
		return err
	}
	var lower fs.FileInfo
	if lowerDir {
		if lower, err = r.lower.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			lower = nil
		} else if err != nil {
			return err
		}
	}
	switch {
	case isWhiteout(upper):
		if lower == nil {
			return nil // made and deleted again
		}
		return r.deleted(p, lower)
	case upper.IsDir():
		lowerIsDir := lower != nil && lower.IsDir()
		if lower != nil && !lowerIsDir {
			if err := r.deleted(p, lower); err != nil {
				return err
			}
		}
		empty, err := r.dir(p, lowerIsDir)
		if err != nil || lowerIsDir || !empty {
			return err
		}
		return r.add(protocol.FileChange{Path: p, Op: protocol.ChangeAdded, Kind: "dir", Mode: perm(upper)})
	case upper.Mode().IsRegular() || upper.Mode()&fs.ModeSymlink != 0:
		if lower != nil && kind(lower) == "" || lower != nil && lower.IsDir() {
			if err := r.deleted(p, lower); err != nil {
				return err
			}
			lower = nil
		}
		return r.file(p, upper, lower)
	default:
		return r.omit(p, upper, "")
	}
}

// file reads the file or symbolic link p of the upper layer, which the
// workspace has as lower (a file or a link), or has not (nil).
func (r *changeReader) file(p string, upper, lower fs.FileInfo) error {
	c := protocol.FileChange{Path: p, Op: protocol.ChangeAdded, Kind: kind(upper), Size: upper.Size()}
	if lower != nil {
		c.Op = protocol.ChangeChanged
	}
	var after []byte
	if c.Kind == "symlink" {
		link, err := r.upper.Readlink(p)
		if err != nil {
			return err
		}
		c.Link, c.Size = link, int64(len(link))
	} else {
		c.Mode = perm(upper)
		if r.room(upper.Size(), "changed") {
			var err error
			if after, _, err = r.read(r.upper, p, upper, upper.Size()); err != nil {
				return err
			}
			c.Content = after
			r.bytes += int64(len(after))
		}
	}
	var before []byte
	beforeKept := true
	if lower != nil && r.tooLarge == "" {
		var err error
		if c.Before, before, beforeKept, err = r.identity(p, lower); err != nil {
			return err
		}
		if c.Before == identityOf(c) && (c.Kind != "file" || perm(lower) == c.Mode) {
			return nil // copied up, and left as it was (touched, say)
		}
	}
	if c.Kind == "file" && r.tooLarge == "" {
		c.Binary = !isText(after) || !isText(before)
		var b bytes.Buffer
		if lower != nil && lower.Mode().IsRegular() && perm(lower) != c.Mode {
			fmt.Fprintf(&b, "mode %04o → %04o\n", perm(lower), c.Mode)
		}
		switch {
		case !beforeKept:
			fmt.Fprintf(&b, "(was %d bytes, too large to compare)", lower.Size())
		case !c.Binary && !bytes.Equal(before, after):
			b.WriteString(diffLines(splitLines(string(before)), splitLines(string(after))))
		}
		c.Diff = text.Truncate(b.String(), maxSandboxDiff)
		r.bytes += int64(len(c.Diff))
	}
	return r.add(c)
}

// deleted records the deletion of p, which the workspace has as info: of
// a folder, every file in it first, then the folder.
func (r *changeReader) deleted(p string, info fs.FileInfo) error {
	c := protocol.FileChange{Path: p, Op: protocol.ChangeDeleted, Kind: kind(info)}
	switch c.Kind {
	case "":
		return r.omit(p, info, "deleted")
	case "dir":
		if err := r.depth(p); err != nil {
			return err
		}
		names, err := r.names(r.lower, p, false)
		if err != nil {
			return err
		}
		for _, name := range names {
			child := path.Join(p, name)
			info, err := r.lower.Lstat(child)
			if err != nil {
				return err
			}
			if err := r.deleted(child, info); err != nil {
				return err
			}
		}
	default:
		if r.room(0, "deleted") {
			var err error
			if c.Before, _, _, err = r.identity(p, info); err != nil {
				return err
			}
		}
	}
	return r.add(c)
}

// identity is the Before of p in the workspace, which is info (a file or
// a link), with its content when it has at most maxFileBytes (kept);
// changedDuringRun for one changed since the run began.
func (r *changeReader) identity(p string, info fs.FileInfo) (sum string, content []byte, kept bool, err error) {
	sum, content, kept, err = r.readIdentity(p, info)
	if st, ok := info.Sys().(*syscall.Stat_t); err == nil && sum != "" && ok && !time.Unix(st.Ctim.Unix()).Before(r.started) {
		sum = changedDuringRun
	}
	return sum, content, kept, err
}

// readIdentity is identity as the file is now.
func (r *changeReader) readIdentity(p string, info fs.FileInfo) (sum string, content []byte, kept bool, err error) {
	if info.Mode()&fs.ModeSymlink != 0 {
		link, err := r.lower.Readlink(p)
		if err != nil {
			return "", nil, false, err
		}
		return linkIdentity(link), nil, false, nil
	}
	if r.hashed+info.Size() > maxSandboxHashed {
		r.setTooLarge(fmt.Sprintf("the files it changed or deleted hold more than the %d MiB read to check them before they are applied", maxSandboxHashed>>20))
		return "", nil, false, nil
	}
	r.hashed += info.Size()
	content, sum, err = r.read(r.lower, p, info, maxFileBytes)
	return sum, content, content != nil || info.Size() == 0, err
}

// read reads the regular file p of root, which Lstat gave as info,
// hashing all of it and giving its content when it has at most keep bytes.
func (r *changeReader) read(root *os.Root, p string, info fs.FileInfo, keep int64) (content []byte, sum string, err error) {
	f, err := r.open(root, p)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	if !opened.Mode().IsRegular() || !os.SameFile(info, opened) {
		return nil, "", fmt.Errorf("%s changed while it was read", p)
	}
	h := sha256.New()
	var buf bytes.Buffer
	var w io.Writer = h
	if info.Size() <= keep {
		w = io.MultiWriter(h, &buf)
	}
	if _, err := io.Copy(w, f); err != nil {
		return nil, "", err
	}
	if info.Size() <= keep {
		content = buf.Bytes()
		if content == nil {
			content = []byte{}
		}
	}
	return content, hex.EncodeToString(h.Sum(nil)), nil
}

// open opens the regular file p of root without blocking (a named pipe
// swapped in opens at once, and is refused by its mode). A file of the
// upper layer the worker may not read (a command's chmod 000) is the
// worker's own: it is made readable.
func (r *changeReader) open(root *os.Root, p string) (*os.File, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrPermission) && root == r.upper {
		if err := root.Chmod(p, 0o600); err != nil {
			return nil, err
		}
		f, err = root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	}
	return f, err
}

// names are the names in the folder p of root, sorted, at most
// maxSandboxFiles of them (more are too many changes). A folder of the
// upper layer the worker may not read is made readable, as in open.
func (r *changeReader) names(root *os.Root, p string, upper bool) ([]string, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if errors.Is(err, fs.ErrPermission) && upper {
		if err := root.Chmod(p, 0o700); err != nil {
			return nil, err
		}
		f, err = root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	for {
		batch, err := f.Readdirnames(256)
		names = append(names, batch...)
		if len(names) > maxSandboxFiles {
			r.setTooLarge(fmt.Sprintf("it changed more than %d files", maxSandboxFiles))
			return nil, errStopReading
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return names, nil
}

// opaque reports whether the upper layer's folder rel hides the
// workspace's.
func (r *changeReader) opaque(rel string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(filepath.Join(r.upperDir, rel), opaqueXattr, buf)
	return err == nil && string(buf[:n]) == "y"
}

// depth stops the reading at a folder deeper than maxSandboxDepth.
func (r *changeReader) depth(p string) error {
	if strings.Count(p, "/") >= maxSandboxDepth {
		r.setTooLarge(fmt.Sprintf("it changed folders nested more than %d deep", maxSandboxDepth))
		return errStopReading
	}
	return nil
}

// add records c, unless there are too many changes already.
func (r *changeReader) add(c protocol.FileChange) error {
	if len(r.changes) >= maxSandboxFiles {
		r.setTooLarge(fmt.Sprintf("it changed more than %d files", maxSandboxFiles))
		return errStopReading
	}
	r.changes = append(r.changes, c)
	return nil
}

// omit records p, which is info and neither a file, a folder nor a link.
func (r *changeReader) omit(p string, info fs.FileInfo, how string) error {
	what := "a special file"
	switch m := info.Mode(); {
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeDevice != 0:
		what = "a device"
	}
	if how != "" {
		what = how + ", " + what
	}
	if len(r.omitted) >= maxSandboxFiles {
		r.setTooLarge(fmt.Sprintf("it changed more than %d files", maxSandboxFiles))
		return errStopReading
	}
	r.omitted = append(r.omitted, fmt.Sprintf("%s (%s)", p, what))
	return nil
}

// room reports whether size more bytes of content may be carried, and
// makes the run too large when not.
func (r *changeReader) room(size int64, what string) bool {
	if r.tooLarge != "" {
		return false
	}
	if r.bytes+size > maxSandboxBytes {
		r.setTooLarge(fmt.Sprintf("the files it %s hold more than %d MiB", what, maxSandboxBytes>>20))
		return false
	}
	return true
}

// setTooLarge makes the run too large to apply, for why (the first reason
// found).
func (r *changeReader) setTooLarge(why string) {
	if r.tooLarge == "" {
		r.tooLarge = why
	}
}

// pairRenames turns a file deleted and one added with the same content (not
// empty) into the one renamed.
func (r *changeReader) pairRenames() {
	deleted := map[string][]int{}
	for i, c := range r.changes {
		if c.Op == protocol.ChangeDeleted && c.Kind != "dir" && c.Before != "" && c.Before != emptyIdentity {
			deleted[c.Before] = append(deleted[c.Before], i)
		}
	}
	drop := map[int]bool{}
	for i, c := range r.changes {
		if c.Op != protocol.ChangeAdded || c.Kind == "dir" {
			continue
		}
		id := identityOf(c)
		from := deleted[id]
		if len(from) == 0 || r.changes[from[0]].Kind != c.Kind {
			continue
		}
		d := r.changes[from[0]]
		deleted[id] = from[1:]
		drop[from[0]] = true
		r.changes[i].Op, r.changes[i].From, r.changes[i].Before, r.changes[i].Diff = protocol.ChangeRenamed, d.Path, d.Before, ""
	}
	kept := r.changes[:0]
	for i, c := range r.changes {
		if !drop[i] {
			kept = append(kept, c)
		}
	}
	r.changes = kept
}

// emptyIdentity is the identity of an empty file.
var emptyIdentity = hex.EncodeToString(sha256.New().Sum(nil))

// identityOf is what Before would be of the file c makes.
func identityOf(c protocol.FileChange) string {
	if c.Kind == "symlink" {
		return linkIdentity(c.Link)
	}
	return sumHex(sha256.New(), c.Content)
}

// linkIdentity is a symbolic link's Before: its target's SHA-256, after a
// prefix that no file shares by chance.
func linkIdentity(target string) string {
	return sumHex(sha256.New(), []byte("symlink\x00"+target))
}

func sumHex(h hash.Hash, b []byte) string {
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// kind is a FileChange's Kind of info: "file", "symlink", "dir", or "" for
// anything else.
func kind(info fs.FileInfo) string {
	switch m := info.Mode(); {
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "dir"
	}
	return ""
}

// perm is the permission bits of info: never setuid, setgid or sticky,
// which applying does not give.
func perm(info fs.FileInfo) uint32 { return uint32(info.Mode().Perm()) }

// isWhiteout reports whether info is an overlay's whiteout: a character
// device numbered 0/0.
func isWhiteout(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && info.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0
}

// isText reports whether b is text: valid UTF-8 without a NUL byte.
func isText(b []byte) bool { return bytes.IndexByte(b, 0) < 0 && utf8.Valid(b) }
