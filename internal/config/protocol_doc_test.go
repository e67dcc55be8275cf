package config

import (
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/docstest"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// protocolDoc is the wire protocol's reference, whose configuration table
// these tests hold to Load.
const protocolDoc = "../../docs/protocol.md"

// configTable is the heading of the table of every variable Load reads.
const configTable = "### Variables of the worker and the API"

// docVariables reads the configuration table: each row's variable and its
// default cell.
func docVariables(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(protocolDoc)
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	start := slices.Index(lines, configTable)
	require.GreaterOrEqual(t, start, 0, "%s has no heading %q", protocolDoc, configTable)
	out := map[string]string{}
	for _, l := range lines[start+1:] {
		if strings.HasPrefix(l, "#") {
			break
		}
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := docstest.TableRows(l)[0]
		names := docstest.CodeSpans(cells[0])
		require.Len(t, names, 1, "one variable a row: %s", l)
		require.NotContains(t, out, names[0], "%s has two rows", names[0])
		out[names[0]] = cells[1]
	}
	return out
}

func TestProtocolDocTablesEveryVariableLoadReadsAndNoOther(t *testing.T) {
	documented := docVariables(t)
	read := append(slices.Clone(known), EnvConfigFile)
	for _, name := range read {
		require.Contains(t, documented, name, "Load reads %s: give it a row in the table under %q of %s", name, configTable, protocolDoc)
	}
	for name := range documented {
		require.Contains(t, read, name, "the table under %q of %s lists %s, which Load does not read", configTable, protocolDoc, name)
	}
}

func TestProtocolDocGivesEveryVariableLoadsDefault(t *testing.T) {
	defaults := map[string]string{
		EnvTemporalAddress:      DefaultTemporalAddress,
		EnvTemporalNamespace:    DefaultTemporalNamespace,
		EnvTaskQueue:            DefaultTaskQueue,
		EnvHTTPAddr:             DefaultHTTPAddr,
		EnvOpenAIModel:          DefaultOpenAIModel,
		EnvWorkspace:            DefaultWorkspace,
		EnvRequiredTools:        DefaultRequiredTools,
		EnvApprovalTimeout:      text.Duration(DefaultApprovalTimeout),
		EnvHeartbeatInterval:    text.Duration(DefaultHeartbeatInterval),
		EnvMaxSteps:             strconv.Itoa(DefaultMaxSteps),
		EnvMaxTemporalCalls:     strconv.Itoa(DefaultMaxTemporalCalls),
		EnvWorkflowCacheSize:    strconv.Itoa(DefaultWorkflowCacheSize),
		EnvBashTimeout:          text.Duration(DefaultBashTimeout),
		EnvLogLevel:             strings.ToLower(slog.LevelInfo.String()),
		EnvMetricsAddr:          DefaultMetricsAddr,
		EnvMCPConfig:            DefaultMCPConfig,
		EnvAllowBypass:          "false",
		EnvAllowUnauthenticated: "false",
		EnvModelContextWindow:   strconv.Itoa(protocol.DefaultContextWindow),
		EnvContextRecent:        strconv.Itoa(protocol.DefaultContextRecent),
		EnvPayloadDir:           DefaultPayloadDir,
		EnvAuditDB:              DefaultAuditDB,
		EnvNotifyFormat:         "json",
		EnvPayloadThreshold:     strconv.Itoa(payloads.DefaultThreshold),
		EnvPayloadS3Secure:      "false",
		EnvGRPCCompression:      GRPCCompressionGzip,
		EnvBashSandbox:          protocol.SandboxOff,
		EnvSlackResponseURL:     DefaultSlackResponseURL,
	}
	for name, cell := range docVariables(t) {
		if want, ok := defaults[name]; ok {
			require.True(t, strings.HasPrefix(cell, "`"+want+"`"), "%s defaults to %q; the table says %s", name, want, cell)
		} else {
			require.True(t, strings.HasPrefix(cell, "none"), "%s has no default; the table says %s", name, cell)
		}
	}
}
