package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/devserver"
)

// Where the Temporal server and its SQL schema tool are, when not in the
// module's bin folder (`make temporal-server` builds both there).
const (
	envServerBin  = "TOLLGATE_TEMPORAL_SERVER_BIN"
	envSQLToolBin = "TOLLGATE_TEMPORAL_SQL_TOOL_BIN"
)

// setupTimeout bounds each of the compose file's setup scripts.
const setupTimeout = 3 * time.Minute

// TemporalServer is a Temporal server with every service in one process,
// on PostgreSQL.
type TemporalServer struct {
	Process   *Process
	HostPort  string // the frontend's gRPC address
	Namespace string
}

// serverConfig is the server's configuration: the compose file's (its
// temporalio/server image renders the same from DB=postgres12 and the
// POSTGRES_* variables): PostgreSQL for persistence and for visibility,
// four history shards, every service in one process, and the dynamic
// config the compose file mounts. Only the ports differ: free loopback
// ones.
var serverConfig = template.Must(template.New("config").Parse(`log:
  stdout: true
  level: warn

persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: 4
  datastores:
    default:
      sql:
        pluginName: postgres12
        databaseName: temporal
        connectAddr: "{{.PG}}"
        connectProtocol: tcp
        user: {{.User}}
        password: {{.Password}}
        maxConns: 20
        maxIdleConns: 20
        maxConnLifetime: 1h
    visibility:
      sql:
        pluginName: postgres12
        databaseName: temporal_visibility
        connectAddr: "{{.PG}}"
        connectProtocol: tcp
        user: {{.User}}
        password: {{.Password}}
        maxConns: 10
        maxIdleConns: 10
        maxConnLifetime: 1h

global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1

services:
{{- range .Services}}
  {{.Name}}:
    rpc:
      grpcPort: {{.GRPC}}
      membershipPort: {{.Membership}}
      bindOnLocalHost: true
{{- if .HTTP}}
      httpPort: {{.HTTP}}
{{- end}}
{{- end}}

clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "127.0.0.1:{{.Frontend}}"

dcRedirectionPolicy:
  policy: noop

dynamicConfigClient:
  filepath: "{{.DynamicConfig}}"
  pollInterval: 10s
`))

// service is one of the server's services and its ports.
type service struct {
	Name                   string
	GRPC, Membership, HTTP string
}

// StartTemporalServer runs the Temporal server on pg as docker-compose.yml
// runs it: the compose file's schema script, the server with the compose
// file's configuration and dynamic config, and the compose file's namespace
// script (the namespace and tollgate's search attributes). The server's
// binaries come from `make temporal-server` (bin/) or their variables; it
// dies with the test binary, and cleanup stops it.
func StartTemporalServer(t testing.TB, pg Postgres) TemporalServer {
	t.Helper()
	root := moduleRoot(t)
	setupSchema(t, root, pg)
	tc := startTemporal(t, root, pg)
	setupNamespace(t, root, tc)
	return tc
}

// setupSchema creates Temporal's two databases with the compose file's
// own script (deploy/temporal/setup-schema.sh), against the schema files
// of the server's own version, twice: the script says it is safe to run
// again.
func setupSchema(t testing.TB, root string, pg Postgres) {
	t.Helper()
	schema := filepath.Join(serverModule(t), "schema", "postgresql", "v12")
	env := append(os.Environ(),
		"PATH="+toolsPath(t)+":"+os.Getenv("PATH"),
		"POSTGRES_SEEDS="+pg.Host, "DB_PORT="+pg.Port, "POSTGRES_USER="+pg.User, "POSTGRES_PWD="+pg.Password,
		"TEMPORAL_SCHEMA_DIR="+schema,
	)
	for range 2 {
		runScript(t, filepath.Join(root, "deploy", "temporal", "setup-schema.sh"), env)
	}
}

// startTemporal runs the Temporal server on pg, as the compose file's
// temporal service does, and returns once its frontend listens.
func startTemporal(t testing.TB, root string, pg Postgres) TemporalServer {
	t.Helper()
	port := lowPorts(t)
	services := []service{
		{Name: "frontend", GRPC: port(), Membership: port(), HTTP: port()},
		{Name: "history", GRPC: port(), Membership: port()},
		{Name: "matching", GRPC: port(), Membership: port()},
		{Name: "worker", GRPC: port(), Membership: port()},
	}
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "config"), 0o755))
	var cfg bytes.Buffer
	require.NoError(t, serverConfig.Execute(&cfg, map[string]any{
		"PG": pg.String(), "User": pg.User, "Password": pg.Password,
		"Services": services, "Frontend": services[0].GRPC,
		"DynamicConfig": filepath.Join(root, "deploy", "temporal", "dynamicconfig", "tollgate.yaml"),
	}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config", "cluster.yaml"), cfg.Bytes(), 0o644))

	// proctest.Start runs a program without arguments: a script execs
	// the server with its own.
	start := filepath.Join(dir, "start.sh")
	script := fmt.Sprintf("#!/bin/sh\nexec '%s' --root '%s' --config config --env cluster --allow-no-auth start\n",
		toolBin(t, envServerBin, "temporal-server"), dir)
	require.NoError(t, os.WriteFile(start, []byte(script), 0o755))
	p := Start(t, "temporal-server", start, EnvironWithout("TEMPORAL_"))
	tc := TemporalServer{Process: p, HostPort: "127.0.0.1:" + services[0].GRPC, Namespace: "default"}
	require.Eventually(t, func() bool {
		select {
		case <-p.Exited:
			return true
		default:
		}
		c, err := net.Dial("tcp", tc.HostPort)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 2*time.Minute, 100*time.Millisecond, "the Temporal frontend listens on %s", tc.HostPort)
	RequireRunning(t, p)
	return tc
}

// lowPorts returns a function that gives loopback ports that were free a
// moment ago, each once, below 32768: the server records its services'
// membership ports in PostgreSQL as a SMALLINT (cluster_membership.rpc_port),
// and one from the kernel's ephemeral range (32768 and up) stops it with
// "unable to initialize membership heartbeats".
func lowPorts(t testing.TB) func() string {
	next := 20000 + rand.IntN(10000)
	return func() string {
		t.Helper()
		for range 2000 {
			next++
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(next))
			if err == nil {
				require.NoError(t, ln.Close())
				return strconv.Itoa(next)
			}
		}
		require.FailNow(t, "no free loopback port below 32768")
		return ""
	}
}

// setupNamespace creates the namespace and tollgate's search attributes
// with the compose file's own script (deploy/temporal/setup-namespace.sh),
// which waits for the cluster's health first and uses the operator API:
// SQL visibility takes custom search attributes only that way.
func setupNamespace(t testing.TB, root string, tc TemporalServer) {
	t.Helper()
	runScript(t, filepath.Join(root, "deploy", "temporal", "setup-namespace.sh"), append(os.Environ(),
		"PATH="+toolsPath(t)+":"+os.Getenv("PATH"),
		"TEMPORAL_ADDRESS="+tc.HostPort, "TEMPORAL_NAMESPACE="+tc.Namespace,
	))
}

// runScript runs one of the compose file's setup scripts with env and
// logs what it said.
func runScript(t testing.TB, script string, env []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", script)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s:\n%s", filepath.Base(script), out)
	// The script's own lines, not the tools' logs.
	var said []string
	for line := range strings.Lines(string(out)) {
		if !strings.HasPrefix(line, "20") && !strings.HasPrefix(line, "{") {
			said = append(said, strings.TrimSpace(line))
		}
	}
	t.Logf("%s: %s", filepath.Base(script), strings.Join(said, "; "))
}

// toolsPath is a folder with the programs the setup scripts call by name:
// temporal-sql-tool and the Temporal CLI (temporal).
func toolsPath(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tools")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.Symlink(toolBin(t, envSQLToolBin, "temporal-sql-tool"), filepath.Join(dir, "temporal-sql-tool")))
	require.NoError(t, os.Symlink(toolBin(t, devserver.EnvBinary, "temporal"), filepath.Join(dir, "temporal")))
	return dir
}

// toolBin is $env, else bin/<name> in the module's folder.
func toolBin(t testing.TB, env, name string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		bin = filepath.Join(moduleRoot(t), "bin", name)
	}
	_, err := os.Stat(bin)
	require.NoError(t, err, "%s is missing: `make cluster-test` builds it into bin/ (or set %s)", name, env)
	return bin
}

// serverModule is the folder of the Temporal server's module, of the
// version the server binary says it is, in the module cache (where
// `go install` of the server put it): its schema files are there.
func serverModule(t testing.TB) string {
	t.Helper()
	out, err := exec.Command(toolBin(t, envServerBin, "temporal-server"), "--version").Output()
	require.NoError(t, err)
	fields := strings.Fields(string(out)) // "temporal version 1.29.1"
	require.NotEmpty(t, fields)
	version := "v" + fields[len(fields)-1]
	dl, err := exec.Command("go", "mod", "download", "-json", "go.temporal.io/server@"+version).Output()
	require.NoError(t, err, "go mod download go.temporal.io/server@%s", version)
	var mod struct{ Dir string }
	require.NoError(t, json.Unmarshal(dl, &mod))
	require.NotEmpty(t, mod.Dir)
	return mod.Dir
}

// moduleRoot is the folder of this repository's module.
func moduleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// RequireRunning fails the test, with the process's log, when p has exited.
func RequireRunning(t testing.TB, p *Process) {
	t.Helper()
	select {
	case <-p.Exited:
		require.Failf(t, p.Name+" exited", "%s", p.Log())
	default:
	}
}
