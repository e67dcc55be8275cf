package config

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/internal/payloads"
)

// env returns a getenv over a fixed map, so tests never see the real
// environment.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestLoadWithNothingSetGivesTheDocumentedDefaults(t *testing.T) {
	c, err := Load(env(nil))
	require.NoError(t, err)

	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, Config{
		TemporalAddress:   "127.0.0.1:7233",
		TemporalNamespace: "default",
		Temporal:          client.Options{HostPort: "127.0.0.1:7233", Namespace: "default"},
		TaskQueue:         "tollgate",
		HTTPAddr:          "127.0.0.1:8080",
		OpenAIModel:       "gpt-4o-mini",
		Workspace:         filepath.Join(wd, "workspace"),
		RequiredTools:     []string{"Write", "Edit", "Bash"},
		ApprovalTimeout:   3 * time.Minute,
		HeartbeatInterval: 15 * time.Second,
		MaxTemporalCalls:  DefaultMaxTemporalCalls,
		MaxSteps:          25,
		WorkflowCacheSize: 1000,
		BashTimeout:       2 * time.Minute,
		BashSandbox:       "off",
		LogLevel:          slog.LevelInfo,
		MetricsAddr:       "127.0.0.1:9090",
		ContextWindow:     128000,
		ContextRecent:     25,
		Payloads:          payloads.Config{Dir: filepath.Join(wd, ".tollgate", "payloads"), Threshold: payloads.DefaultThreshold},
		AuditDB:           filepath.Join(wd, ".tollgate", "audit.db"),
		NotifyFormat:      "json",
		Slack:             Slack{ResponseURL: DefaultSlackResponseURL},
	}, c)
}

func TestLoadTakesEveryVariableFromTheEnvironment(t *testing.T) {
	key, err := links.NewKey("0123456789abcdef0123456789abcdef")
	require.NoError(t, err)
	c, err := Load(env(map[string]string{
		"TEMPORAL_ADDRESS":                        "temporal:7233",
		"TEMPORAL_NAMESPACE":                      "agents",
		"TOLLGATE_TASK_QUEUE":                     "q",
		"HTTP_ADDR":                               ":9000",
		"OPENAI_BASE_URL":                         "http://127.0.0.1:8090/v1",
		"OPENAI_API_KEY":                          "sk-test",
		"OPENAI_MODEL":                            "scripted",
		"TOLLGATE_WORKSPACE":                      "/srv/ws",
		"TOLLGATE_REQUIRED_TOOLS":                 " Bash , Task ,",
		"TOLLGATE_APPROVAL_TIMEOUT":               "90s",
		"TOLLGATE_HEARTBEAT_INTERVAL":             "1s",
		"TOLLGATE_MAX_TEMPORAL_CALLS":             "16",
		"TOLLGATE_AGENTS_DIR":                     "/srv/agents",
		"TOLLGATE_MAX_STEPS":                      "3",
		"TOLLGATE_WORKFLOW_CACHE_SIZE":            "500",
		"TOLLGATE_CONTEXT_BUDGET":                 "200000",
		"TOLLGATE_MODEL_CONTEXT_WINDOW":           "32000",
		"TOLLGATE_CONTEXT_RECENT_PERCENT":         "40",
		"TOLLGATE_BASH_TIMEOUT":                   "5s",
		"TOLLGATE_BASH_ENV":                       "GOPATH, GOFLAGS",
		"TOLLGATE_BASH_SANDBOX":                   "preview",
		"TOLLGATE_LOG_LEVEL":                      "debug",
		"TOLLGATE_METRICS_ADDR":                   ":9464",
		"TOLLGATE_PAYLOAD_DIR":                    "/srv/payloads",
		"TOLLGATE_PAYLOAD_THRESHOLD":              "1000",
		"TOLLGATE_PAYLOAD_S3_ENDPOINT":            "s3:9000",
		"TOLLGATE_PAYLOAD_S3_SECURE":              "true",
		"TOLLGATE_PAYLOAD_S3_BUCKET":              "payloads",
		"TOLLGATE_PAYLOAD_S3_PREFIX":              "tg/",
		"TOLLGATE_PAYLOAD_S3_REGION":              "eu-1",
		"TOLLGATE_PAYLOAD_S3_ACCESS_KEY":          "ak",
		"TOLLGATE_PAYLOAD_S3_SECRET_KEY":          "sk",
		"TOLLGATE_AUDIT_DB":                       "postgres://tollgate:secret@db:5432/tollgate",
		"TOLLGATE_LINK_SECRET":                    "0123456789abcdef0123456789abcdef",
		"TOLLGATE_PUBLIC_URL":                     "https://tollgate.example.com/",
		"TOLLGATE_NOTIFY_FORMAT":                  "slack",
		"TOLLGATE_NOTIFY_REMINDER":                "2m",
		"TOLLGATE_BUDGET_TURN_TOKENS":             "5000",
		"TOLLGATE_BUDGET_TURN_TOOL_CALLS":         "20",
		"TOLLGATE_BUDGET_TURN_TIME":               "10m",
		"TOLLGATE_BUDGET_CONVERSATION_TOKENS":     "90000",
		"TOLLGATE_BUDGET_CONVERSATION_TOOL_CALLS": "300",
		"TOLLGATE_BUDGET_CONVERSATION_TIME":       "8h",
	}))
	require.NoError(t, err)
	require.Equal(t, Config{
		TemporalAddress:   "temporal:7233",
		TemporalNamespace: "agents",
		Temporal:          client.Options{HostPort: "temporal:7233", Namespace: "agents"},
		TaskQueue:         "q",
		HTTPAddr:          ":9000",
		OpenAIBaseURL:     "http://127.0.0.1:8090/v1",
		OpenAIAPIKey:      "sk-test",
		OpenAIModel:       "scripted",
		Workspace:         "/srv/ws",
		RequiredTools:     []string{"Bash", "Task"},
		ApprovalTimeout:   90 * time.Second,
		HeartbeatInterval: time.Second,
		MaxTemporalCalls:  16,
		AgentsDir:         "/srv/agents",
		MaxSteps:          3,
		WorkflowCacheSize: 500,
		ContextBudget:     200000,
		ContextWindow:     32000,
		ContextRecent:     40,
		BashTimeout:       5 * time.Second,
		BashEnv:           []string{"GOPATH", "GOFLAGS"},
		BashSandbox:       "preview",
		LogLevel:          slog.LevelDebug,
		MetricsAddr:       ":9464",
		AuditDB:           "postgres://tollgate:secret@db:5432/tollgate",
		Links:             &key,
		PublicURL:         "https://tollgate.example.com",
		Slack:             Slack{ResponseURL: DefaultSlackResponseURL},
		NotifyFormat:      "slack",
		NotifyReminder:    2 * time.Minute,
		Budgets: Budgets{TurnTokens: 5000, TurnToolCalls: 20, TurnTime: 10 * time.Minute,
			ConversationTokens: 90000, ConversationToolCalls: 300, ConversationTime: 8 * time.Hour},
		Payloads: payloads.Config{
			Dir: "/srv/payloads", Threshold: 1000, S3Endpoint: "s3:9000", S3Secure: true, S3Bucket: "payloads",
			S3Prefix: "tg/", S3Region: "eu-1", S3AccessKey: "ak", S3SecretKey: "sk",
		},
	}, c)
}

func TestTheAuditLedgerIsASQLiteFileByDefaultAndOffTurnsItOff(t *testing.T) {
	c, err := Load(env(nil))
	require.NoError(t, err)
	abs, err := filepath.Abs(DefaultAuditDB)
	require.NoError(t, err)
	require.Equal(t, abs, c.AuditDB)
	c, err = Load(env(map[string]string{"TOLLGATE_AUDIT_DB": "off"}))
	require.NoError(t, err)
	require.Empty(t, c.AuditDB)
}

func TestGRPCCompressionIsTheSDKsGzipUnlessTurnedOff(t *testing.T) {
	c, err := Load(env(nil))
	require.NoError(t, err)
	require.Nil(t, c.Temporal.ConnectionOptions.GrpcCompression, "the SDK's default, gzip")
	c, err = Load(env(map[string]string{"TOLLGATE_GRPC_COMPRESSION": "none"}))
	require.NoError(t, err)
	require.IsType(t, &client.GrpcCompressionNone{}, c.Temporal.ConnectionOptions.GrpcCompression)
	_, err = Load(env(map[string]string{"TOLLGATE_GRPC_COMPRESSION": "zstd"}))
	require.ErrorContains(t, err, "TOLLGATE_GRPC_COMPRESSION")
	require.ErrorContains(t, err, "zstd")
}

func TestALinkSecretNeedsThePublicURLTheWorkerMakesLinksUnder(t *testing.T) {
	secret := map[string]string{"TOLLGATE_LINK_SECRET": "0123456789abcdef0123456789abcdef"}
	_, err := LoadFor(Worker, env(secret))
	require.ErrorContains(t, err, `TOLLGATE_PUBLIC_URL="": required with TOLLGATE_LINK_SECRET`)
	c, err := LoadFor(API, env(secret))
	require.NoError(t, err, "the API checks links without it")
	require.NotNil(t, c.Links)
	require.NotContains(t, fmt.Sprintf("%v %+v %#v", c, c, c), "0123456789abcdef", "the secret is never printed")
}

func TestRequiredToolsNoneProtectsNothing(t *testing.T) {
	c, err := Load(env(map[string]string{"TOLLGATE_REQUIRED_TOOLS": "none"}))
	require.NoError(t, err)
	require.Empty(t, c.RequiredTools)
}

func TestMetricsAddrOffTurnsTheWorkersMetricsEndpointOff(t *testing.T) {
	for _, v := range []string{"off", "OFF"} {
		c, err := Load(env(map[string]string{"TOLLGATE_METRICS_ADDR": v}))
		require.NoError(t, err)
		require.Empty(t, c.MetricsAddr)
	}
}

func TestMCPConfigIsDotMCPJSONWhenItExistsANamedFileThatMustExistOrOff(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	c, err := Load(env(nil))
	require.NoError(t, err)
	require.Empty(t, c.MCPConfig, "no .mcp.json, no MCP")

	require.NoError(t, os.WriteFile(".mcp.json", []byte(`{"mcpServers":{}}`), 0o644))
	c, err = Load(env(nil))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, ".mcp.json"), c.MCPConfig)

	c, err = Load(env(map[string]string{"TOLLGATE_MCP_CONFIG": "off"}))
	require.NoError(t, err)
	require.Empty(t, c.MCPConfig)

	_, err = Load(env(map[string]string{"TOLLGATE_MCP_CONFIG": "servers.json"}))
	require.ErrorContains(t, err, "TOLLGATE_MCP_CONFIG")
	require.ErrorContains(t, err, "servers.json")
}

func TestRelativeWorkspaceIsMadeAbsolute(t *testing.T) {
	c, err := Load(env(map[string]string{"TOLLGATE_WORKSPACE": "ws/../other"}))
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(wd, "other"), c.Workspace)
}

func TestConfigFileFillsInWhatTheEnvironmentLeavesUnset(t *testing.T) {
	file := writeFile(t, `
TOLLGATE_APPROVAL_TIMEOUT: 5m
TOLLGATE_MAX_STEPS: 7
TOLLGATE_TASK_QUEUE: from-file
TOLLGATE_REQUIRED_TOOLS: [Write, Bash]
`)
	c, err := Load(env(map[string]string{
		"TOLLGATE_CONFIG_FILE": file,
		"TOLLGATE_TASK_QUEUE":  "from-env",
	}))
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, c.ApprovalTimeout)
	require.Equal(t, 7, c.MaxSteps)
	require.Equal(t, "from-env", c.TaskQueue, "the environment wins over the file")
	require.Equal(t, []string{"Write", "Bash"}, c.RequiredTools)
	require.Equal(t, file, c.ConfigFile)
}

func TestConfigFileWithUnknownKeyIsAnError(t *testing.T) {
	file := writeFile(t, "TOLLGATE_APROVAL_TIMEOUT: 5m\n")
	_, err := Load(env(map[string]string{"TOLLGATE_CONFIG_FILE": file}))
	require.ErrorContains(t, err, `unknown key "TOLLGATE_APROVAL_TIMEOUT"`)
}

func TestMissingConfigFileIsNamedInTheError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(env(map[string]string{"TOLLGATE_CONFIG_FILE": missing}))
	require.ErrorContains(t, err, `TOLLGATE_CONFIG_FILE="`+missing+`"`)
}

func TestBadValueInConfigFileIsNamedLikeAnEnvironmentVariable(t *testing.T) {
	file := writeFile(t, "TOLLGATE_APPROVAL_TIMEOUT: soon\n")
	_, err := Load(env(map[string]string{"TOLLGATE_CONFIG_FILE": file}))
	require.ErrorContains(t, err, `TOLLGATE_APPROVAL_TIMEOUT="soon": not a duration (example: 3m)`)
	require.ErrorContains(t, err, file)
}

func TestEachBadVariableIsNamedWithItsValue(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string
	}{
		{"TOLLGATE_APPROVAL_TIMEOUT", "abc", `TOLLGATE_APPROVAL_TIMEOUT="abc": not a duration (example: 3m)`},
		{"TOLLGATE_APPROVAL_TIMEOUT", "0s", `TOLLGATE_APPROVAL_TIMEOUT="0s": must be greater than zero (example: 3m)`},
		{"TOLLGATE_HEARTBEAT_INTERVAL", "-1s", `TOLLGATE_HEARTBEAT_INTERVAL="-1s": must be greater than zero (example: 15s)`},
		{"TOLLGATE_BASH_TIMEOUT", "2", `TOLLGATE_BASH_TIMEOUT="2": not a duration (example: 2m)`},
		{"TOLLGATE_MAX_STEPS", "many", `TOLLGATE_MAX_STEPS="many": not a whole number (example: 25)`},
		{"TOLLGATE_MAX_STEPS", "0", `TOLLGATE_MAX_STEPS="0": must be at least 1 (example: 25)`},
		{"TOLLGATE_WORKFLOW_CACHE_SIZE", "0", `TOLLGATE_WORKFLOW_CACHE_SIZE="0": must be at least 1 (example: 1000)`},
		{"TOLLGATE_WORKFLOW_CACHE_SIZE", "10k", `TOLLGATE_WORKFLOW_CACHE_SIZE="10k": not a whole number (example: 1000)`},
		{"TOLLGATE_CONTEXT_BUDGET", "0", `TOLLGATE_CONTEXT_BUDGET="0": must be at least 1 (example: 409600)`},
		{"TOLLGATE_MODEL_CONTEXT_WINDOW", "128k", `TOLLGATE_MODEL_CONTEXT_WINDOW="128k": not a whole number (example: 128000)`},
		{"TOLLGATE_CONTEXT_RECENT_PERCENT", "95", `TOLLGATE_CONTEXT_RECENT_PERCENT="95": must be at most 90 (example: 25)`},
		{"TOLLGATE_REQUIRED_TOOLS", ",", `TOLLGATE_REQUIRED_TOOLS=",": no names in the list`},
		{"TOLLGATE_LOG_LEVEL", "loud", `TOLLGATE_LOG_LEVEL="loud": not a log level`},
		{"TOLLGATE_METRICS_ADDR", "9090", `TOLLGATE_METRICS_ADDR="9090": not a host:port to listen on (example: 127.0.0.1:9090; "off" for none)`},
		{"TOLLGATE_METRICS_ADDR", "127.0.0.1:http", `TOLLGATE_METRICS_ADDR="127.0.0.1:http": port "http" is not a number from 0 to 65535`},
		{"TOLLGATE_METRICS_ADDR", "127.0.0.1:70000", `TOLLGATE_METRICS_ADDR="127.0.0.1:70000": port "70000" is not a number from 0 to 65535`},
		{"TOLLGATE_LINK_SECRET", "too-short", `TOLLGATE_LINK_SECRET="<secret>": a link secret needs at least 32 characters, this one has 9`},
		{"TOLLGATE_BUDGET_TURN_TOOL_CALLS", "0", `TOLLGATE_BUDGET_TURN_TOOL_CALLS="0": must be at least 1 (example: 50)`},
		{"TOLLGATE_BUDGET_CONVERSATION_TIME", "a day", `TOLLGATE_BUDGET_CONVERSATION_TIME="a day": not a duration (example: 24h)`},
		{"TOLLGATE_NOTIFY_FORMAT", "xml", `TOLLGATE_NOTIFY_FORMAT="xml": not one of json, slack`},
		{"TOLLGATE_NOTIFY_REMINDER", "soon", `TOLLGATE_NOTIFY_REMINDER="soon": not a duration (example: 1m)`},
		{"TOLLGATE_BASH_SANDBOX", "on", `TOLLGATE_BASH_SANDBOX="on": not one of off, preview`},
		{"TOLLGATE_PUBLIC_URL", "tollgate.example.com", `TOLLGATE_PUBLIC_URL="tollgate.example.com": not an http(s) URL`},
		{"TOLLGATE_BASH_ENV", "GOPATH,TOLLGATE_LINK_SECRET", `TOLLGATE_BASH_ENV="GOPATH,TOLLGATE_LINK_SECRET": TOLLGATE_LINK_SECRET is a setting of tollgate's or of its Temporal client, which may hold a secret: commands never get it`},
		{"TOLLGATE_BASH_ENV", "OPENAI_API_KEY", `OPENAI_API_KEY is a setting of tollgate's`},
		{"TOLLGATE_BASH_ENV", "TEMPORAL_API_KEY", `TEMPORAL_API_KEY is a setting of tollgate's or of its Temporal client`},
		{"TOLLGATE_BASH_ENV", "GO PATH", `TOLLGATE_BASH_ENV="GO PATH": "GO PATH" is not the name of an environment variable`},
		{"TOLLGATE_AUDIT_DB", "mysql://db/x", `TOLLGATE_AUDIT_DB="mysql://db/x": neither a postgres:// URL nor a file path ("off" keeps no ledger)`},
		{"TOLLGATE_AUDIT_DB", "postgres://tollgate:secret@/x", `TOLLGATE_AUDIT_DB="postgres://tollgate:xxxxx@/x": not a PostgreSQL URL`},
		{"TOLLGATE_AUDIT_DB", "postgres:///x?user=tollgate&password=secret", `TOLLGATE_AUDIT_DB="postgres:///x?password=xxxxx&user=tollgate": not a PostgreSQL URL`},
		{"TOLLGATE_AUDIT_DB", "mysql://tollgate:secret@db/x", `TOLLGATE_AUDIT_DB="mysql://tollgate:xxxxx@db/x": neither a postgres:// URL`},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			_, err := Load(env(map[string]string{tc.name: tc.value}))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestAllBadVariablesAreReportedAtOnce(t *testing.T) {
	_, err := Load(env(map[string]string{
		"TOLLGATE_APPROVAL_TIMEOUT":   "abc",
		"TOLLGATE_HEARTBEAT_INTERVAL": "0",
		"TOLLGATE_MAX_STEPS":          "-2",
	}))
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "TOLLGATE_APPROVAL_TIMEOUT")
	require.Contains(t, msg, "TOLLGATE_HEARTBEAT_INTERVAL")
	require.Contains(t, msg, "TOLLGATE_MAX_STEPS")
	require.Len(t, strings.Split(msg, "\n"), 3, "one line per bad variable")
}

func TestLoggerHonoursTheConfiguredLevel(t *testing.T) {
	var buf bytes.Buffer
	l := Config{LogLevel: slog.LevelWarn}.Logger(&buf)
	l.Info("hidden")
	TemporalLogger(l).Warn("shown", "workflowId", "w1")
	require.NotContains(t, buf.String(), "hidden")
	require.Contains(t, buf.String(), "shown")
	require.Contains(t, buf.String(), "workflowId=w1")
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	return writeFileNamed(t, "tollgate.yaml", content)
}

func TestNotifyURLMustBeHTTP(t *testing.T) {
	env := map[string]string{EnvNotifyURL: "ftp://x"}
	_, err := Load(func(k string) string { return env[k] })
	require.ErrorContains(t, err, `TOLLGATE_NOTIFY_URL="ftp://x": not an http(s) URL`)

	env[EnvNotifyURL] = "http://127.0.0.1:9000/hook"
	c, err := Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9000/hook", c.NotifyURL)
}

func TestTemporalClientsFollowTheStandardConfigurationProfilesAndVariables(t *testing.T) {
	// A profile of temporal.toml, as for Temporal Cloud with an API key.
	toml := writeFileNamed(t, "temporal.toml", "[profile.cloud]\naddress = \"tollgate.a1b2c.tmprl.cloud:7233\"\nnamespace = \"tollgate.a1b2c\"\napi_key = \"secret-api-key\"\n")
	c, err := Load(env(map[string]string{"TEMPORAL_CONFIG_FILE": toml, "TEMPORAL_PROFILE": "cloud"}))
	require.NoError(t, err)
	require.Equal(t, "tollgate.a1b2c.tmprl.cloud:7233", c.TemporalAddress)
	require.Equal(t, "tollgate.a1b2c", c.TemporalNamespace)
	require.NotNil(t, c.Temporal.Credentials, "the API key")
	require.NotNil(t, c.Temporal.ConnectionOptions.TLS, "an API key implies TLS")

	// Variables override the profile.
	c, err = Load(env(map[string]string{"TEMPORAL_CONFIG_FILE": toml, "TEMPORAL_PROFILE": "cloud", "TEMPORAL_NAMESPACE": "other"}))
	require.NoError(t, err)
	require.Equal(t, "other", c.Temporal.Namespace)

	// mTLS from files.
	c, err = Load(env(map[string]string{"TEMPORAL_TLS": "true", "TEMPORAL_TLS_SERVER_NAME": "temporal.internal"}))
	require.NoError(t, err)
	require.NotNil(t, c.Temporal.ConnectionOptions.TLS)
	require.Equal(t, "temporal.internal", c.Temporal.ConnectionOptions.TLS.ServerName)

	// A profile that is not there, or a certificate that cannot be read,
	// stops the process with an error naming them.
	_, err = Load(env(map[string]string{"TEMPORAL_CONFIG_FILE": toml, "TEMPORAL_PROFILE": "staging"}))
	require.ErrorContains(t, err, "Temporal client configuration")
	require.ErrorContains(t, err, "staging")
	_, err = Load(env(map[string]string{"TEMPORAL_TLS_CLIENT_CERT_PATH": "/nonexistent/client.pem", "TEMPORAL_TLS_CLIENT_KEY_PATH": "/nonexistent/client.key"}))
	require.ErrorContains(t, err, "/nonexistent/client.pem")
}

func writeFileNamed(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestEachBinaryValidatesOnlyTheVariablesItUses(t *testing.T) {
	workerOnly := map[string]string{"TOLLGATE_MCP_CONFIG": "missing.json", "TOLLGATE_MAX_STEPS": "many"}
	apiOnly := map[string]string{"TOLLGATE_API_TOKENS": "short", "TOLLGATE_HEARTBEAT_INTERVAL": "often"}

	_, err := LoadFor(API, env(workerOnly))
	require.NoError(t, err, "the API reads no worker variable")
	_, err = LoadFor(Worker, env(apiOnly))
	require.NoError(t, err, "the worker reads no API variable")

	_, err = LoadFor(Worker, env(workerOnly))
	require.ErrorContains(t, err, "TOLLGATE_MCP_CONFIG")
	require.ErrorContains(t, err, "TOLLGATE_MAX_STEPS")
	_, err = LoadFor(API, env(apiOnly))
	require.ErrorContains(t, err, "TOLLGATE_API_TOKENS")
	require.ErrorContains(t, err, "TOLLGATE_HEARTBEAT_INTERVAL")

	// What both read stops both.
	for _, b := range []Binary{Worker, API} {
		_, err = LoadFor(b, env(map[string]string{"TOLLGATE_LOG_LEVEL": "loud"}))
		require.ErrorContains(t, err, "TOLLGATE_LOG_LEVEL")
	}
}

func TestTheModelsWindowComesFromItsNameUnlessSet(t *testing.T) {
	for model, window := range map[string]int{
		"gpt-4o-mini": 128000, "gpt-4.1-nano": 1047576, "gpt-4": 8192, "openai/gpt-4o": 128000,
		"claude-sonnet-4-5": 200000, "llama3.1:8b": 131072, "scripted": 128000,
	} {
		require.Equal(t, window, ContextWindowOf(model), model)
	}
}
