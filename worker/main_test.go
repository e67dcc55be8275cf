package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/proctest"
)

// workerStopsAtStart runs the worker binary bin with env (besides a
// workspace in dir, and a Temporal address where nothing listens, so the
// worker must stop before it dials), requires that it exits with an
// error, and returns what it wrote to stderr.
func workerStopsAtStart(t *testing.T, bin, dir string, env ...string) string {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_"), "TEMPORAL_ADDRESS=127.0.0.1:1", "TOLLGATE_WORKSPACE="+filepath.Join(dir, "ws"))
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the worker must exit with an error, got %v", err)
	require.NotZero(t, exit.ExitCode())
	return stderr.String()
}

func TestPolicyRuleThatDoesNotCompileStopsTheWorker(t *testing.T) {
	dir := t.TempDir()
	bin := proctest.Build(t, "github.com/tollgate/tollgate/worker")()
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte("tools:\n  Bash:\n    when: args.command.startsWith(\n"), 0o644))

	stderr := workerStopsAtStart(t, bin, dir, "TOLLGATE_POLICY_FILE="+policyFile)
	require.Contains(t, stderr, "TOLLGATE_POLICY_FILE")
	require.Contains(t, stderr, "tool Bash")
	require.Contains(t, stderr, `args.command.startsWith(`)
}

func TestPolicyRuleThatMayCostTooMuchStopsTheWorkerNamingItAndTheLimit(t *testing.T) {
	dir := t.TempDir()
	bin := proctest.Build(t, "github.com/tollgate/tollgate/worker")()
	policyFile := filepath.Join(dir, "policy.yaml")
	// A million iterations for every call: half a second and more in a
	// workflow task, which the SDK fails as deadlocked past one.
	costly := "true"
	for i := 6; i > 0; i-- {
		costly = "[0,1,2,3,4,5,6,7,8,9].all(x" + string(rune('0'+i)) + ", " + costly + ")"
	}
	require.NoError(t, os.WriteFile(policyFile, []byte("tools:\n  Read:\n    require: never\n  Write:\n    when: '"+costly+"'\n"), 0o644))

	stderr := workerStopsAtStart(t, bin, dir, "TOLLGATE_POLICY_FILE="+policyFile)
	require.Contains(t, stderr, "TOLLGATE_POLICY_FILE")
	require.Contains(t, stderr, "tool Write")
	require.Contains(t, stderr, "past the limit of 500000 that one call may cost")
	require.NotContains(t, stderr, "tool Read")
}

func TestMCPServerThatCannotStartStopsTheWorkerSayingWhy(t *testing.T) {
	dir := t.TempDir()
	bin := proctest.Build(t, "github.com/tollgate/tollgate/worker")()
	mcpConfig := filepath.Join(dir, ".mcp.json")
	require.NoError(t, os.WriteFile(mcpConfig, []byte(`{"mcpServers":{"search":{"command":"sh","args":["-c","echo SEARCH_API_KEY is not set >&2; exit 1"]}}}`), 0o644))

	stderr := workerStopsAtStart(t, bin, dir, "TOLLGATE_MCP_CONFIG="+mcpConfig, "TOLLGATE_METRICS_ADDR=off")
	require.Contains(t, stderr, "TOLLGATE_MCP_CONFIG")
	require.Contains(t, stderr, `MCP server \"search\"`)
	require.Contains(t, stderr, "SEARCH_API_KEY is not set")
}

func TestStartUpCheckSaysHowMuchOfThePayloadStoreItCanRead(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "payloads")
	ctx := context.Background()
	for _, text := range []string{"one output", "another output"} {
		p, err := converter.GetDefaultDataConverter().ToPayload(strings.Repeat(text+"\n", 4096))
		require.NoError(t, err)
		_, err = payloads.Dir(store).Store(converter.StorageDriverStoreContext{Context: ctx}, []*commonpb.Payload{p})
		require.NoError(t, err)
	}
	// A lifecycle rule took every chunk of the store.
	require.NoError(t, os.RemoveAll(filepath.Join(store, "chunks")))
	bin := proctest.Build(t, "github.com/tollgate/tollgate/worker")()

	cmd := exec.Command(bin)
	// Nothing listens on this address: the worker stops when it dials,
	// after the check.
	cmd.Env = append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_"), "TEMPORAL_ADDRESS=127.0.0.1:1",
		"TOLLGATE_WORKSPACE="+filepath.Join(dir, "ws"), "TOLLGATE_METRICS_ADDR=off", "TOLLGATE_PAYLOAD_DIR="+store)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.Error(t, cmd.Run())

	require.Contains(t, stderr.String(), "payload store: some payloads cannot be read")
	require.Contains(t, stderr.String(), "payload folder "+store+" stores and reads back; it holds 2 payloads; of 2 checked, 0 can be read whole and 2 cannot")
}

func TestAPolicyExampleThatFailsStopsTheWorkerNamingTheRuleAndTheExample(t *testing.T) {
	dir := t.TempDir()
	bin := proctest.Build(t, "github.com/tollgate/tollgate/worker")()
	policyFile := filepath.Join(dir, "policy.yaml")
	// The Write example passes only normalized: the model's absolute path
	// is docs/guide.md to the rule. The Bash one fails.
	require.NoError(t, os.WriteFile(policyFile, []byte(`tools:
  Write:
    when: '!args.file_path.startsWith("docs/")'
    examples:
      allow: [{file_path: `+filepath.Join(dir, "ws", "docs", "guide.md")+`, content: x}]
  Bash:
    when: 'args.command.contains("sudo")'
    examples:
      ask: [{command: "rm -rf /"}]
`), 0o644))

	stderr := workerStopsAtStart(t, bin, dir, "TOLLGATE_POLICY_FILE="+policyFile)
	require.Contains(t, stderr, "TOLLGATE_POLICY_FILE")
	require.Contains(t, stderr, `tool Bash: example ask {\"command\":\"rm -rf /\"}: the rule lets it run without a person`)
	require.NotContains(t, stderr, "tool Write")
	require.NotContains(t, stderr, "dial Temporal")
}
