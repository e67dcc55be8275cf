package proctest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// envPostgresBin names the folder of PostgreSQL's server programs (initdb,
// postgres, pg_isready), when they are not where Debian's postgresql
// package puts them.
const envPostgresBin = "TOLLGATE_POSTGRES_BIN"

// postgresStop bounds an immediate shutdown before the server is killed.
const postgresStop = 30 * time.Second

// Postgres is a private PostgreSQL server on a loopback port, with one
// superuser that signs in with a password, as docker-compose.yml's
// postgresql service has.
type Postgres struct {
	Host, Port     string
	User, Password string
	// PID is the server's main process, which leads the process group of
	// all of its processes (for their CPU time).
	PID int
}

// StartPostgres makes a new database cluster in a folder of its own, with
// superuser user (password the same), and runs its server in the
// foreground, so that it dies with the test binary; cleanup stops it.
// PostgreSQL refuses to run as root: as root, initdb and the server run as
// the postgres user of Debian's package.
func StartPostgres(t testing.TB, user string) Postgres {
	t.Helper()
	bin := postgresBin(t)
	// Not t.TempDir: its parents are root's alone, and the server must
	// reach its data folder.
	dir, err := os.MkdirTemp("", "tollgate-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cred := postgresUser(t)
	if cred != nil {
		require.NoError(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
	}

	pg := Postgres{Host: "127.0.0.1", User: user, Password: user}
	pwfile := filepath.Join(dir, "pwfile")
	require.NoError(t, os.WriteFile(pwfile, []byte(pg.Password+"\n"), 0o600))
	if cred != nil {
		require.NoError(t, os.Chown(pwfile, int(cred.Uid), int(cred.Gid)))
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", pg.User, "--pwfile", pwfile,
		"--auth-host", "scram-sha-256", "--auth-local", "trust", "--no-locale", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := initdb.CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)

	_, pg.Port, err = net.SplitHostPort(FreeAddr(t))
	require.NoError(t, err)
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	// The server's settings are PostgreSQL's defaults, as in the compose
	// file's postgres image, but for where it listens.
	server := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses="+pg.Host, "-p", pg.Port, "-c", "unix_socket_directories="+dir)
	server.Stdout, server.Stderr = logFile, logFile
	server.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, server.Start())
	pg.PID = server.Process.Pid
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = server.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		// An immediate shutdown: the cluster is thrown away, so the
		// checkpoint of a fast one (SIGINT), which syncs every database
		// the test made, would be waited out for nothing.
		_ = server.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(postgresStop):
			_ = syscall.Kill(-server.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- postgres log ---\n%s", b)
		}
	})

	isReady := func() bool {
		return exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", pg.Host, "-p", pg.Port).Run() == nil
	}
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		return isReady()
	}, time.Minute, 100*time.Millisecond, "PostgreSQL accepts connections on %s", pg)
	select {
	case <-exited:
		b, _ := os.ReadFile(logPath)
		require.Failf(t, "PostgreSQL exited", "%v\n%s", waitErr, b)
	default:
	}
	return pg
}

// postgresBin finds the folder of PostgreSQL's server programs:
// $TOLLGATE_POSTGRES_BIN, else the newest of Debian's
// /usr/lib/postgresql/<version>/bin.
func postgresBin(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv(envPostgresBin); dir != "" {
		_, err := os.Stat(filepath.Join(dir, "initdb"))
		require.NoError(t, err, "%s=%s has no initdb", envPostgresBin, dir)
		return dir
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorOf(a) - majorOf(b) })
	for _, dir := range slices.Backward(dirs) {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir
		}
	}
	t.Fatalf("this test runs a PostgreSQL server, and none is installed: " +
		"`apt-get install -y postgresql` (Debian; .ci/run does it), or set " + envPostgresBin + " to the folder of initdb and postgres")
	return ""
}

// majorOf is the version in /usr/lib/postgresql/<version>/bin.
func majorOf(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// postgresUser is who PostgreSQL runs as: nil (this process's user) unless
// this process is root, which PostgreSQL refuses, and then the postgres
// user that Debian's package makes.
func postgresUser(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		t.Fatalf("PostgreSQL will not run as root, and there is no postgres user to run it as: `apt-get install -y postgresql` makes one")
	}
	require.NoError(t, err)
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	require.NoError(t, err)
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	require.NoError(t, err)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// String is the server's address, for messages.
func (pg Postgres) String() string { return fmt.Sprintf("%s:%s", pg.Host, pg.Port) }

// URL is a connection URL for database db (postgres, the one initdb
// makes, or one the test created).
func (pg Postgres) URL(db string) string {
	return (&url.URL{Scheme: "postgres", User: url.UserPassword(pg.User, pg.Password), Host: net.JoinHostPort(pg.Host, pg.Port), Path: "/" + db, RawQuery: "sslmode=disable"}).String()
}
