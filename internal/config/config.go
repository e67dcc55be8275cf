// Package config reads tollgate's settings once, in main, from the
// environment and an optional YAML file, into a typed struct with defaults
// and validation that names every bad variable.
package config

import (
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// Names of the variables tollgate reads. A YAML configuration file uses the
// same names as keys.
const (
	EnvTemporalAddress   = "TEMPORAL_ADDRESS"
	EnvTemporalNamespace = "TEMPORAL_NAMESPACE"
	EnvTaskQueue         = "TOLLGATE_TASK_QUEUE"
	EnvHTTPAddr          = "HTTP_ADDR"
	EnvOpenAIBaseURL     = "OPENAI_BASE_URL"
	EnvOpenAIAPIKey      = "OPENAI_API_KEY"
	EnvOpenAIModel       = "OPENAI_MODEL"
	EnvWorkspace         = "TOLLGATE_WORKSPACE"
	EnvRequiredTools     = "TOLLGATE_REQUIRED_TOOLS"
	EnvApprovalTimeout   = "TOLLGATE_APPROVAL_TIMEOUT"
	EnvHeartbeatInterval = "TOLLGATE_HEARTBEAT_INTERVAL"
	EnvAgentsDir         = "TOLLGATE_AGENTS_DIR"
	EnvPolicyFile        = "TOLLGATE_POLICY_FILE"
	EnvNotifyURL         = "TOLLGATE_NOTIFY_URL"
	EnvMaxSteps          = "TOLLGATE_MAX_STEPS"
	EnvBashTimeout       = "TOLLGATE_BASH_TIMEOUT"
	EnvLogLevel          = "TOLLGATE_LOG_LEVEL"
	EnvMetricsAddr       = "TOLLGATE_METRICS_ADDR"
	EnvMCPConfig         = "TOLLGATE_MCP_CONFIG"
	// EnvMaxTemporalCalls bounds the Temporal calls the API's requests
	// have in flight at once (starting a turn, a decision, a query); a
	// request past it answers 503 with Retry-After at once.
	EnvMaxTemporalCalls = "TOLLGATE_MAX_TEMPORAL_CALLS"
	// EnvWorkflowCacheSize bounds the workflows the worker keeps in memory
	// between their tasks (the SDK's sticky cache); a turn waiting for a
	// person costs its place and is replayed from history when evicted.
	EnvWorkflowCacheSize = "TOLLGATE_WORKFLOW_CACHE_SIZE"
	// EnvBashEnv lists, comma-separated, the variables of the worker's
	// environment that Bash commands get besides PATH, HOME and the few
	// others every program needs (activities.BaseEnv). Default none.
	EnvBashEnv = "TOLLGATE_BASH_ENV"
	// EnvBashSandbox is what a protected Bash call does before a person is
	// asked: "off" (the default) nothing; "preview" runs it in the
	// sandbox over a copy-on-write view of the workspace, shows what it
	// changed, and applies exactly that on approve (docs/security.md).
	EnvBashSandbox = "TOLLGATE_BASH_SANDBOX"
	// EnvAPITokens holds the API's bearer tokens as comma-separated
	// token:principal[:role+role...] entries (roles: permissions and team
	// roles); unset, the API asks for none.
	EnvAPITokens = "TOLLGATE_API_TOKENS"
	// EnvAllowBypass, true, lets callers of an API without tokens send
	// bypassApproval (with tokens, the bypass role decides). Default false.
	EnvAllowBypass = "TOLLGATE_ALLOW_BYPASS"
	// EnvAllowUnauthenticated, true, lets an API without tokens listen on
	// an address other than loopback. Default false: it refuses to start.
	EnvAllowUnauthenticated = "TOLLGATE_ALLOW_UNAUTHENTICATED"
	// EnvAllowedOrigins lists, comma-separated, the browser origins
	// (scheme://host[:port]) besides the API's own that may send
	// state-changing requests. Default none.
	EnvAllowedOrigins = "TOLLGATE_ALLOWED_ORIGINS"
	// EnvContextBudget bounds the bytes of message text a model call may
	// carry, within what the model's context window holds; unset, the
	// window alone decides.
	EnvContextBudget = "TOLLGATE_CONTEXT_BUDGET"
	// EnvModelContextWindow is the model's context window in tokens;
	// unset, ContextWindowOf the model's name.
	EnvModelContextWindow = "TOLLGATE_MODEL_CONTEXT_WINDOW"
	// EnvContextRecent is the share of the model's view, in percent (1 to
	// 90), that the newest whole turns may take before older ones are
	// summarized; default protocol.DefaultContextRecent.
	EnvContextRecent = "TOLLGATE_CONTEXT_RECENT_PERCENT"
	// EnvCodecOrigins lists the browser origins (the Temporal Web UI's) that
	// may call the API's codec endpoint. Default none.
	EnvCodecOrigins = "TOLLGATE_CODEC_ORIGINS"
	// Payloads past EnvPayloadThreshold bytes are kept out of history: in
	// EnvPayloadDir, or with EnvPayloadS3Endpoint set in an S3 bucket. The
	// worker and the API must use the same store.
	EnvPayloadDir         = "TOLLGATE_PAYLOAD_DIR"
	EnvPayloadThreshold   = "TOLLGATE_PAYLOAD_THRESHOLD"
	EnvPayloadS3Endpoint  = "TOLLGATE_PAYLOAD_S3_ENDPOINT"
	EnvPayloadS3Secure    = "TOLLGATE_PAYLOAD_S3_SECURE"
	EnvPayloadS3Bucket    = "TOLLGATE_PAYLOAD_S3_BUCKET"
	EnvPayloadS3Prefix    = "TOLLGATE_PAYLOAD_S3_PREFIX"
	EnvPayloadS3Region    = "TOLLGATE_PAYLOAD_S3_REGION"
	EnvPayloadS3AccessKey = "TOLLGATE_PAYLOAD_S3_ACCESS_KEY"
	EnvPayloadS3SecretKey = "TOLLGATE_PAYLOAD_S3_SECRET_KEY"
	// EnvAuditDB is the audit ledger's database: the path of a SQLite file,
	// a postgres:// URL, or off. Default DefaultAuditDB. The worker writes
	// it and the API reads it (GET /audit), so both name the same one.
	EnvAuditDB = "TOLLGATE_AUDIT_DB"
	// EnvGRPCCompression is how the process's Temporal clients compress
	// their requests: gzip (the SDK's default) or none, which saves both
	// sides the CPU where the network is not the cost (one machine, a LAN).
	EnvGRPCCompression = "TOLLGATE_GRPC_COMPRESSION"
	// EnvLinkSecret signs (the worker) and checks (the API) the one-click
	// decision links of notices; unset, notices carry none and the API
	// answers no link. At least 32 characters; both must have the same.
	EnvLinkSecret = "TOLLGATE_LINK_SECRET"
	// EnvPublicURL is the API's address as people reach it, under which
	// the worker makes links (required with EnvLinkSecret).
	EnvPublicURL = "TOLLGATE_PUBLIC_URL"
	// EnvNotifyFormat is json (the Notice as it is) or slack (a
	// Slack-compatible message with buttons).
	EnvNotifyFormat = "TOLLGATE_NOTIFY_FORMAT"
	// EnvNotifyReminder is how long before a call's timeout its reminder
	// goes out; unset, at four fifths of the time.
	EnvNotifyReminder = "TOLLGATE_NOTIFY_REMINDER"
	// EnvSlackSigningSecret turns on approval from Slack: the API checks
	// the signature of Slack's interaction callbacks with it (POST
	// /slack/interactions), and the worker, which needs only to know it
	// is set, gives slack-format notices buttons that decide in Slack.
	EnvSlackSigningSecret = "TOLLGATE_SLACK_SIGNING_SECRET"
	// EnvSlackUsers maps Slack user ids to the principals they decide as:
	// comma-separated USERID=principal entries (U01ABC=alice).
	EnvSlackUsers = "TOLLGATE_SLACK_USERS"
	// EnvSlackResponseURL is what the response_url of a callback must
	// start with before the API posts the outcome there; default
	// DefaultSlackResponseURL.
	EnvSlackResponseURL = "TOLLGATE_SLACK_RESPONSE_URL"
	// Budgets: what a turn, and a conversation, may spend (model tokens as
	// the server reports them, tool calls, wall time) before a person is
	// asked whether it may go on. Unset, none.
	EnvBudgetTurnTokens            = "TOLLGATE_BUDGET_TURN_TOKENS"
	EnvBudgetTurnToolCalls         = "TOLLGATE_BUDGET_TURN_TOOL_CALLS"
	EnvBudgetTurnTime              = "TOLLGATE_BUDGET_TURN_TIME"
	EnvBudgetConversationTokens    = "TOLLGATE_BUDGET_CONVERSATION_TOKENS"
	EnvBudgetConversationToolCalls = "TOLLGATE_BUDGET_CONVERSATION_TOOL_CALLS"
	EnvBudgetConversationTime      = "TOLLGATE_BUDGET_CONVERSATION_TIME"
	// EnvConfigFile names a YAML file holding any of the variables above.
	// It is read from the environment only.
	EnvConfigFile = "TOLLGATE_CONFIG_FILE"
)

// MetricsOff is the value of TOLLGATE_METRICS_ADDR that turns the worker's metrics
// endpoint off. An empty value means "unset" and so the default.
const MetricsOff = "off"

// MCPOff is the value of TOLLGATE_MCP_CONFIG that starts no MCP server,
// even when a .mcp.json is where the default looks.
const MCPOff = "off"

// AuditOff is the value of TOLLGATE_AUDIT_DB that keeps no audit ledger.
const AuditOff = "off"

// NoRequiredTools is the value of TOLLGATE_REQUIRED_TOOLS that protects no
// tool at all. An empty value means "unset" and so the default.
const NoRequiredTools = "none"

// Defaults, as docs/protocol.md's configuration table gives them; those the
// workflows share are package protocol's.
const (
	DefaultTemporalAddress   = "127.0.0.1:7233"
	DefaultTemporalNamespace = "default"
	DefaultTaskQueue         = protocol.DefaultTaskQueue
	DefaultHTTPAddr          = "127.0.0.1:8080"
	DefaultOpenAIModel       = "gpt-4o-mini"
	DefaultWorkspace         = "./workspace"
	DefaultRequiredTools     = "Write,Edit,Bash"
	DefaultApprovalTimeout   = protocol.DefaultApprovalTimeout
	DefaultHeartbeatInterval = 15 * time.Second
	DefaultMaxSteps          = protocol.DefaultMaxSteps
	DefaultBashTimeout       = protocol.DefaultBashTimeout
	DefaultMetricsAddr       = "127.0.0.1:9090"
	// DefaultWorkflowCacheSize is the worker's sticky cache, in workflows:
	// bench/RESULTS.md measures about 200 KiB resident a cached waiting
	// turn, so some 200 MiB at most, where the SDK's own default of 10,000
	// would let an inbox of waiting turns grow the worker to 2 GiB.
	DefaultWorkflowCacheSize = 1000
	DefaultPayloadDir        = ".tollgate/payloads"
	DefaultAuditDB           = ".tollgate/audit.db"
	// DefaultMaxTemporalCalls is EnvMaxTemporalCalls's default.
	DefaultMaxTemporalCalls = 64
	// DefaultSlackResponseURL is where Slack's response_urls live.
	DefaultSlackResponseURL = "https://hooks.slack.com/"
	// DefaultMCPConfig is read when it exists, as Claude Code reads a
	// project's .mcp.json; a file named by TOLLGATE_MCP_CONFIG must exist.
	DefaultMCPConfig = ".mcp.json"
)

// Config is every setting of the worker and the API.
type Config struct {
	// TemporalAddress is the host:port of the Temporal frontend.
	TemporalAddress string
	// TemporalNamespace is the Temporal namespace tollgate's workflows run in.
	TemporalNamespace string
	// Temporal are the options every Temporal client of the process starts
	// from: the SDK's standard client configuration (envconfig: TLS and
	// mTLS, an API key, gRPC headers, a profile of temporal.toml, the
	// TEMPORAL_* variables), with TemporalAddress and TemporalNamespace.
	// The caller adds its logger, metrics and payload store.
	Temporal client.Options
	// TaskQueue is the task queue the worker polls and the API starts on.
	TaskQueue string
	// HTTPAddr is where the API listens.
	HTTPAddr string

	// OpenAIBaseURL is the base URL of an OpenAI-compatible server; empty
	// means OpenAI itself.
	OpenAIBaseURL string
	// OpenAIAPIKey is the key sent to the model server.
	OpenAIAPIKey string
	// OpenAIModel is the model name sent with every model call.
	OpenAIModel string

	// Workspace is the absolute path of the folder the file and shell tools
	// are confined to.
	Workspace string
	// RequiredTools are the tools whose calls wait for a person's approval.
	RequiredTools []string
	// ApprovalTimeout is how long one protected call waits for a decision
	// before it counts as declined.
	ApprovalTimeout time.Duration
	// HeartbeatInterval is how often an idle stream gets a keep-alive.
	HeartbeatInterval time.Duration
	// MaxTemporalCalls bounds the API's Temporal calls in flight (API only).
	MaxTemporalCalls int
	// AgentsDir is the absolute path of the folder of subagent definitions;
	// empty when none is configured.
	AgentsDir string
	// PolicyFile is the absolute path of the approval policy (YAML); empty
	// when RequiredTools alone is the policy.
	PolicyFile string
	// NotifyURL receives a JSON notice of each approval request and a
	// reminder before it expires; empty for none.
	NotifyURL string
	// Budgets bound what a turn and a conversation may spend; zero fields
	// are no bound.
	Budgets Budgets
	// NotifyFormat is activities.NoticeFormatJSON or NoticeFormatSlack.
	NotifyFormat string
	// NotifyReminder is how long before a call's timeout its reminder goes
	// out; zero for a fifth of the timeout.
	NotifyReminder time.Duration
	// Links signs and checks decision links; nil when EnvLinkSecret is
	// unset. PublicURL is the API's address as people reach it.
	Links     *links.Key
	PublicURL string
	// Slack is approval from Slack; its SigningSecret is empty when it is
	// off.
	Slack Slack
	// MaxSteps bounds the model calls of one turn.
	MaxSteps int
	// WorkflowCacheSize is how many workflows the worker keeps cached
	// between their tasks (worker.SetStickyWorkflowCacheSize).
	WorkflowCacheSize int
	// BashTimeout is the default and the upper limit of one Bash call.
	BashTimeout time.Duration
	// BashEnv names the variables of the worker's environment that Bash
	// commands get besides the base few; none of tollgate's own.
	BashEnv []string
	// BashSandbox is protocol.SandboxOff or protocol.SandboxPreview.
	BashSandbox string
	// LogLevel is the lowest level that is logged.
	LogLevel slog.Level
	// MetricsAddr is where the worker serves its metrics (GET /metrics);
	// empty when they are off.
	MetricsAddr string
	// AuditDB is the audit ledger's database (package audit): a SQLite
	// file's absolute path or a postgres:// URL; empty when it is off.
	AuditDB string
	// MCPConfig is the absolute path of the MCP servers' configuration
	// (.mcp.json, Claude Code's format); empty for none.
	MCPConfig string
	// APITokens are the bearer tokens the API accepts, each naming the
	// principal its holder decides as and its roles; empty when the API
	// asks for none.
	APITokens []APIToken
	// AllowBypass lets callers of an API without tokens send
	// bypassApproval.
	AllowBypass bool
	// AllowUnauthenticated lets an API without tokens listen beyond
	// loopback.
	AllowUnauthenticated bool
	// AllowedOrigins are the browser origins besides the API's own that may
	// send state-changing requests.
	AllowedOrigins []string
	// ContextBudget is EnvContextBudget's value; 0 when unset.
	ContextBudget int
	// ContextWindow is EnvModelContextWindow's value, or the model's
	// known window.
	ContextWindow int
	// ContextRecent is EnvContextRecent's value.
	ContextRecent int
	// CodecOrigins are the browser origins that may call the codec
	// endpoint.
	CodecOrigins []string
	// Payloads says where payloads too large for history go.
	Payloads payloads.Config
	// ConfigFile is the YAML file the settings were read from, if any.
	ConfigFile string
}

// APIToken is one bearer token of the API, the principal it names and
// the roles it carries.
type APIToken struct {
	Token     string
	Principal string
	// Roles are what the holder may do (RoleChat, ...), sorted; a token
	// written without any of AllRoles has DefaultRoles.
	Roles []string
	// Teams are the team roles the holder decides in besides Roles
	// (oncall, finance, ...), sorted: any other word among the token's
	// roles. They give no permission of the API; a policy rule's deciders
	// may name them (role:oncall).
	Teams []string
}

// Roles a token may carry.
const (
	// RoleChat sends messages, reads turns and answers client tools.
	RoleChat = "chat"
	// RoleApprove decides approvals, lists them, and reads and revokes
	// grants.
	RoleApprove = "approve"
	// RoleBypass may send bypassApproval.
	RoleBypass = "bypass"
	// RoleAdmin may do everything.
	RoleAdmin = "admin"
)

// AllRoles are the permissions a token may carry, and DefaultRoles those
// of a token written without any (though maybe with team roles).
var (
	AllRoles     = []string{RoleChat, RoleApprove, RoleBypass, RoleAdmin}
	DefaultRoles = []string{RoleApprove, RoleChat}
)

// Has reports whether the token carries role, or admin.
func (t APIToken) Has(role string) bool {
	return slices.Contains(t.Roles, role) || slices.Contains(t.Roles, RoleAdmin)
}

// String shows the principal only, so that printing a Config, or a log
// line, never shows a token.
func (t APIToken) String() string { return t.Principal + ":<token>" }

// GoString keeps %#v from showing the token, as String does for %v.
func (t APIToken) GoString() string {
	return "config.APIToken{Principal: " + strconv.Quote(t.Principal) + "}"
}

// Slack is the configuration of approval from Slack.
type Slack struct {
	// SigningSecret checks Slack's callbacks (the API); the worker only
	// asks whether it is set. Empty when approval from Slack is off.
	SigningSecret string
	// Users maps a Slack user id to the principal it decides as (API
	// only).
	Users map[string]string
	// ResponseURL is what a callback's response_url must start with
	// (API only).
	ResponseURL string
}

// String never shows the signing secret.
func (s Slack) String() string {
	return fmt.Sprintf("{SigningSecret:<%d characters> Users:%v ResponseURL:%s}", len(s.SigningSecret), s.Users, s.ResponseURL)
}

// GoString keeps %#v from showing the signing secret, as String does for
// %v.
func (s Slack) GoString() string { return "config.Slack" + s.String() }

// slackUserPattern is what a Slack user id looks like (U..., or W... for
// an Enterprise Grid user).
var slackUserPattern = regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`)

// MinTokenLength is the shortest bearer token TOLLGATE_API_TOKENS accepts.
const MinTokenLength = 16

// tokenPattern is the syntax of a bearer token (RFC 6750's b64token), so
// that every accepted token can be sent in an Authorization header.
var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9._~+/-]+=*$`)

// teamPattern is what a team role's name may look like: a lowercase
// letter, then lowercase letters, digits, '-' or '_', at most 32
// characters, so that a token written among the roles by mistake (it has
// capitals, or is longer) is refused rather than taken for a team.
var teamPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// principalPattern is what a principal's name may look like.
var principalPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// CheckPerson says why name is not a person's principal, as a token, a
// Slack user or a stand-in names one: not a name at all (the error does
// not show it: a token written in its place would be), or the name
// decisions by a signed link or an unnamed Temporal signal are recorded
// as. nil when it is one.
func CheckPerson(name string) error {
	switch {
	case !principalPattern.MatchString(name):
		return errors.New("the principal must be a name: a letter or digit, then up to 63 letters, digits, '.', '_', '@' or '-'")
	case name == protocol.PrincipalLink || name == protocol.PrincipalTemporal:
		return fmt.Errorf("the principal %q is who decisions through a signed link (%s) or a Temporal signal that names nobody (%s) are recorded as, not a person", name, protocol.PrincipalLink, protocol.PrincipalTemporal)
	}
	return nil
}

// known lists every key Load reads, so that a typo in the YAML file is an
// error rather than a silently ignored setting.
var known = []string{
	EnvTemporalAddress, EnvTemporalNamespace, EnvTaskQueue, EnvHTTPAddr,
	EnvOpenAIBaseURL, EnvOpenAIAPIKey, EnvOpenAIModel, EnvWorkspace,
	EnvRequiredTools, EnvApprovalTimeout, EnvHeartbeatInterval, EnvMaxTemporalCalls, EnvAgentsDir, EnvPolicyFile, EnvNotifyURL,
	EnvMaxSteps, EnvWorkflowCacheSize, EnvBashTimeout, EnvBashEnv, EnvBashSandbox, EnvLogLevel,
	EnvMetricsAddr, EnvMCPConfig, EnvAPITokens, EnvAllowBypass, EnvAllowUnauthenticated, EnvAllowedOrigins,
	EnvCodecOrigins, EnvContextBudget, EnvModelContextWindow, EnvContextRecent, EnvPayloadDir, EnvPayloadThreshold, EnvPayloadS3Endpoint, EnvPayloadS3Secure, EnvPayloadS3Bucket,
	EnvPayloadS3Prefix, EnvPayloadS3Region, EnvPayloadS3AccessKey, EnvPayloadS3SecretKey, EnvAuditDB, EnvGRPCCompression,
	EnvLinkSecret, EnvPublicURL, EnvNotifyFormat, EnvNotifyReminder,
	EnvSlackSigningSecret, EnvSlackUsers, EnvSlackResponseURL,
	EnvBudgetTurnTokens, EnvBudgetTurnToolCalls, EnvBudgetTurnTime,
	EnvBudgetConversationTokens, EnvBudgetConversationToolCalls, EnvBudgetConversationTime,
}

// Budgets are the TOLLGATE_BUDGET_* variables (contract.Budgets).
type Budgets struct {
	TurnTokens, TurnToolCalls                 int
	TurnTime                                  time.Duration
	ConversationTokens, ConversationToolCalls int
	ConversationTime                          time.Duration
}

// Binary says which program's settings to read: each reads, and so
// refuses when bad, only the variables it uses (a worker-only variable
// never stops the API).
type Binary int

// The programs that read the configuration.
const (
	Worker Binary = 1 << iota
	API
	// Both reads every setting (tests, and a check of a whole file).
	Both = Worker | API
)

// Load reads every setting (LoadFor Both).
func Load(getenv func(string) string) (Config, error) { return LoadFor(Both, getenv) }

// LoadFor reads the settings that uses reads. getenv is usually os.Getenv;
// an empty value counts as unset. When TOLLGATE_CONFIG_FILE names a YAML
// file, its keys fill in what the environment leaves unset (any key
// tollgate knows is accepted, whichever program uses it). Every bad
// variable is reported, each error naming the variable and its value.
func LoadFor(uses Binary, getenv func(string) string) (Config, error) {
	c := Config{ConfigFile: getenv(EnvConfigFile)}
	file := map[string]string{}
	if c.ConfigFile != "" {
		var err error
		if file, err = readFile(c.ConfigFile); err != nil {
			return Config{}, err
		}
	}
	r := reader{lookup: func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return file[name]
	}}

	c.TemporalAddress = r.str(EnvTemporalAddress, DefaultTemporalAddress)
	c.TemporalNamespace = r.str(EnvTemporalNamespace, DefaultTemporalNamespace)
	c.Temporal = r.temporal(c.TemporalAddress, c.TemporalNamespace)
	c.TemporalAddress, c.TemporalNamespace = c.Temporal.HostPort, c.Temporal.Namespace
	c.TaskQueue = r.str(EnvTaskQueue, DefaultTaskQueue)
	c.LogLevel = r.level(EnvLogLevel, slog.LevelInfo)
	c.Payloads = payloads.Config{
		Dir:         r.path(EnvPayloadDir, DefaultPayloadDir),
		Threshold:   r.positiveInt(EnvPayloadThreshold, payloads.DefaultThreshold),
		S3Endpoint:  r.str(EnvPayloadS3Endpoint, ""),
		S3Secure:    r.boolean(EnvPayloadS3Secure),
		S3Bucket:    r.str(EnvPayloadS3Bucket, ""),
		S3Prefix:    r.str(EnvPayloadS3Prefix, ""),
		S3Region:    r.str(EnvPayloadS3Region, ""),
		S3AccessKey: r.str(EnvPayloadS3AccessKey, ""),
		S3SecretKey: r.str(EnvPayloadS3SecretKey, ""),
	}
	c.AuditDB = r.auditDB(EnvAuditDB)
	c.Links = r.linkKey(EnvLinkSecret)
	c.PublicURL = strings.TrimSuffix(r.url(EnvPublicURL), "/")
	if uses&Worker != 0 {
		c.OpenAIBaseURL = r.str(EnvOpenAIBaseURL, "")
		c.OpenAIAPIKey = r.str(EnvOpenAIAPIKey, "")
		c.OpenAIModel = r.str(EnvOpenAIModel, DefaultOpenAIModel)
		c.Workspace = r.path(EnvWorkspace, DefaultWorkspace)
		c.RequiredTools = r.list(EnvRequiredTools, DefaultRequiredTools)
		c.ApprovalTimeout = r.duration(EnvApprovalTimeout, DefaultApprovalTimeout)
		c.AgentsDir = r.path(EnvAgentsDir, "")
		c.PolicyFile = r.path(EnvPolicyFile, "")
		c.NotifyURL = r.url(EnvNotifyURL)
		c.NotifyFormat = r.oneOf(EnvNotifyFormat, "json", "json", "slack")
		c.NotifyReminder = r.optionalDuration(EnvNotifyReminder, time.Minute)
		c.Slack.SigningSecret = r.str(EnvSlackSigningSecret, "")
		if c.Links != nil && c.PublicURL == "" {
			r.fail(EnvPublicURL, "", "required with %s: the worker makes links under it (example: https://tollgate.example.com)", EnvLinkSecret)
		}
		c.MaxSteps = r.positiveInt(EnvMaxSteps, DefaultMaxSteps)
		c.WorkflowCacheSize = r.positiveInt(EnvWorkflowCacheSize, DefaultWorkflowCacheSize)
		c.Budgets = Budgets{
			TurnTokens:            r.optionalCount(EnvBudgetTurnTokens, 100000),
			TurnToolCalls:         r.optionalCount(EnvBudgetTurnToolCalls, 50),
			TurnTime:              r.optionalDuration(EnvBudgetTurnTime, time.Hour),
			ConversationTokens:    r.optionalCount(EnvBudgetConversationTokens, 1000000),
			ConversationToolCalls: r.optionalCount(EnvBudgetConversationToolCalls, 500),
			ConversationTime:      r.optionalDuration(EnvBudgetConversationTime, 24*time.Hour),
		}
		c.BashTimeout = r.duration(EnvBashTimeout, DefaultBashTimeout)
		c.BashEnv = r.envNames(EnvBashEnv)
		c.BashSandbox = r.oneOf(EnvBashSandbox, protocol.SandboxOff, protocol.SandboxOff, protocol.SandboxPreview)
		c.MetricsAddr = r.listenAddr(EnvMetricsAddr, DefaultMetricsAddr)
		c.MCPConfig = r.mcpConfig(EnvMCPConfig)
		c.ContextBudget = r.optionalCount(EnvContextBudget, protocol.DefaultContextBudget)
		c.ContextWindow = r.positiveInt(EnvModelContextWindow, ContextWindowOf(c.OpenAIModel))
		c.ContextRecent = r.positiveInt(EnvContextRecent, protocol.DefaultContextRecent)
		if c.ContextRecent > 90 {
			r.fail(EnvContextRecent, strconv.Itoa(c.ContextRecent), "must be at most 90 (example: %d)", protocol.DefaultContextRecent)
		}
	}
	if uses&API != 0 {
		c.HTTPAddr = r.str(EnvHTTPAddr, DefaultHTTPAddr)
		c.HeartbeatInterval = r.duration(EnvHeartbeatInterval, DefaultHeartbeatInterval)
		c.MaxTemporalCalls = r.positiveInt(EnvMaxTemporalCalls, DefaultMaxTemporalCalls)
		c.APITokens = r.tokens(EnvAPITokens)
		c.AllowBypass = r.boolean(EnvAllowBypass)
		c.AllowUnauthenticated = r.boolean(EnvAllowUnauthenticated)
		c.AllowedOrigins = r.origins(EnvAllowedOrigins)
		c.CodecOrigins = r.origins(EnvCodecOrigins)
		c.Slack = r.slack()
	}
	if c.Payloads.S3Endpoint != "" && c.Payloads.S3Bucket == "" {
		r.fail(EnvPayloadS3Bucket, "", "required with %s", EnvPayloadS3Endpoint)
	}

	if err := errors.Join(r.errs...); err != nil {
		if c.ConfigFile != "" {
			err = fmt.Errorf("configuration (environment and %s): %w", c.ConfigFile, err)
		}
		return Config{}, err
	}
	return c, nil
}

// readFile reads a YAML mapping of variable names to values. Scalars are
// taken as their text; a list is joined with commas, so RequiredTools may be
// written either way.
func readFile(name string) (map[string]string, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", EnvConfigFile, name, err)
	}
	var nodes map[string]yaml.Node
	if err := yaml.Unmarshal(data, &nodes); err != nil {
		return nil, fmt.Errorf("%s=%q: not a YAML mapping of variable names to values: %w", EnvConfigFile, name, err)
	}
	values := make(map[string]string, len(nodes))
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(nodes)) {
		node := nodes[key]
		if !slices.Contains(known, key) {
			errs = append(errs, fmt.Errorf("%s: unknown key %q (known: %s)", name, key, strings.Join(known, ", ")))
			continue
		}
		switch node.Kind {
		case yaml.ScalarNode:
			values[key] = node.Value
		case yaml.SequenceNode:
			items := make([]string, 0, len(node.Content))
			for _, item := range node.Content {
				items = append(items, item.Value)
			}
			values[key] = strings.Join(items, ",")
		default:
			errs = append(errs, fmt.Errorf("%s: %s must be a value or a list, line %d", name, key, node.Line))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return values, nil
}

// reader parses variables and collects every error instead of stopping at
// the first.
type reader struct {
	lookup func(string) string
	errs   []error
}

func (r *reader) fail(name, value, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s=%q: %s", name, value, fmt.Sprintf(format, args...)))
}

func (r *reader) str(name, def string) string {
	if v := strings.TrimSpace(r.lookup(name)); v != "" {
		return v
	}
	return def
}

func (r *reader) path(name, def string) string {
	p := r.str(name, def)
	if p == "" {
		return ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		r.fail(name, p, "cannot make the path absolute: %v", err)
		return ""
	}
	return abs
}

// mcpConfig reads the MCP configuration's path: off for none; unset for
// DefaultMCPConfig when that file exists; else a file that must exist.
func (r *reader) mcpConfig(name string) string {
	v := r.str(name, "")
	switch v {
	case MCPOff:
		return ""
	case "":
		if _, err := os.Stat(DefaultMCPConfig); err != nil {
			return ""
		}
		v = DefaultMCPConfig
	}
	abs, err := filepath.Abs(v)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		r.fail(name, v, "%v (%s turns MCP off)", err, MCPOff)
		return ""
	}
	return abs
}

// auditDB reads the audit ledger's database: off for none, a postgres://
// URL (its password never shown in an error), or a SQLite file's path.
func (r *reader) auditDB(name string) string {
	v := r.str(name, DefaultAuditDB)
	switch {
	case v == AuditOff:
		return ""
	case strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://"):
		if u, err := neturl.Parse(v); err != nil || u.Host == "" {
			r.fail(name, text.RedactURL(v), "not a PostgreSQL URL (example: postgres://tollgate:secret@db:5432/tollgate)")
			return ""
		}
		return v
	case strings.Contains(v, "://"):
		r.fail(name, text.RedactURL(v), "neither a postgres:// URL nor a file path (%q keeps no ledger)", AuditOff)
		return ""
	}
	return r.path(name, v)
}

// linkKey reads the link secret; its value never appears in an error.
func (r *reader) linkKey(name string) *links.Key {
	v := r.str(name, "")
	if v == "" {
		return nil
	}
	k, err := links.NewKey(v)
	if err != nil {
		r.fail(name, "<secret>", "%v", err)
		return nil
	}
	return &k
}

// slack reads approval from Slack: the signing secret (never shown in an
// error), and the users, required with it and refused without it.
func (r *reader) slack() Slack {
	s := Slack{SigningSecret: r.str(EnvSlackSigningSecret, ""), ResponseURL: DefaultSlackResponseURL}
	if v := r.url(EnvSlackResponseURL); v != "" {
		// A prefix that ends a path: http://h:1 must not let
		// http://h:10/ by.
		s.ResponseURL = strings.TrimSuffix(v, "/") + "/"
	}
	if s.SigningSecret != "" && len(s.SigningSecret) < 16 {
		r.fail(EnvSlackSigningSecret, "<secret>", "is %d characters long: use the Signing Secret of the Slack app's Basic Information page", len(s.SigningSecret))
	}
	s.Users = r.slackUsers(EnvSlackUsers)
	switch {
	case s.SigningSecret != "" && len(s.Users) == 0:
		r.fail(EnvSlackUsers, "", "required with %s: it says which principal each Slack user decides as (example: U01ABC=alice,U02DEF=bob)", EnvSlackSigningSecret)
	case s.SigningSecret == "" && len(s.Users) > 0:
		r.fail(EnvSlackSigningSecret, "", "required with %s: without it no callback from Slack can be checked", EnvSlackUsers)
	}
	return s
}

// slackUsers reads comma-separated USERID=principal entries; its errors
// name the entry.
func (r *reader) slackUsers(name string) map[string]string {
	raw := r.str(name, "")
	if raw == "" {
		return nil
	}
	users := map[string]string{}
	for _, item := range strings.Split(raw, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		user, principal, ok := strings.Cut(item, "=")
		user, principal = strings.TrimSpace(user), strings.TrimSpace(principal)
		switch {
		case !ok:
			r.fail(name, raw, "entry %q is not a USERID=principal pair (example: U01ABC=alice)", item)
		case !slackUserPattern.MatchString(user):
			r.fail(name, raw, "entry %q: %q is not a Slack user id (U or W, then capital letters and digits: the member id of the user's profile)", item, user)
		case CheckPerson(principal) != nil:
			r.fail(name, raw, "entry %q: %v", item, CheckPerson(principal))
		case users[user] != "":
			r.fail(name, raw, "entry %q: user %s is mapped twice", item, user)
		default:
			users[user] = principal
		}
	}
	if len(users) == 0 {
		r.fail(name, raw, "no USERID=principal entries (example: U01ABC=alice,U02DEF=bob)")
	}
	return users
}

// optionalCount reads a whole number of at least 1, or 0 when unset;
// example shows one in an error.
func (r *reader) optionalCount(name string, example int) int {
	if r.str(name, "") == "" {
		return 0
	}
	return r.positiveInt(name, example)
}

// optionalDuration reads a duration greater than zero, or 0 when unset.
func (r *reader) optionalDuration(name string, example time.Duration) time.Duration {
	if r.str(name, "") == "" {
		return 0
	}
	return r.duration(name, example)
}

// oneOf reads a value that must be one of values; def when unset.
func (r *reader) oneOf(name, def string, values ...string) string {
	v := r.str(name, def)
	if !slices.Contains(values, v) {
		r.fail(name, v, "not one of %s", strings.Join(values, ", "))
		return def
	}
	return v
}

// url reads an optional http or https URL.
func (r *reader) url(name string) string {
	v := r.lookup(name)
	if v == "" {
		return ""
	}
	u, err := neturl.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(name, v, "not an http(s) URL (example: https://hooks.example.com/tollgate)")
		return ""
	}
	return v
}

func (r *reader) list(name, def string) []string {
	raw := r.str(name, def)
	if strings.EqualFold(raw, NoRequiredTools) {
		return []string{}
	}
	var items []string
	for _, item := range strings.Split(raw, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	if len(items) == 0 {
		r.fail(name, raw, "no names in the list (example: %s; %q protects no tool)", def, NoRequiredTools)
	}
	return items
}

// envNamePattern is what the name of an environment variable may be.
var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envNames reads a comma-separated list of the names of environment
// variables to pass on to commands, refusing a name that cannot be one and
// any setting of tollgate's or of its Temporal client (TOLLGATE_*,
// TEMPORAL_*, and the model's), which may hold a secret (the model's key,
// the link secret, credentials) and is never a command's business.
func (r *reader) envNames(name string) []string {
	raw := r.str(name, "")
	var names []string
	for _, item := range strings.Split(raw, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "":
		case !envNamePattern.MatchString(item):
			r.fail(name, raw, "%q is not the name of an environment variable (letters, digits and _, not starting with a digit)", item)
		case slices.Contains(known, item) || strings.HasPrefix(item, "TOLLGATE_") || strings.HasPrefix(item, "TEMPORAL_"):
			r.fail(name, raw, "%s is a setting of tollgate's or of its Temporal client, which may hold a secret: commands never get it", item)
		default:
			names = append(names, item)
		}
	}
	return names
}

func (r *reader) duration(name string, def time.Duration) time.Duration {
	raw := r.str(name, "")
	if raw == "" {
		return def
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		r.fail(name, raw, "not a duration (example: %s)", text.Duration(def))
		return def
	}
	if d <= 0 {
		r.fail(name, raw, "must be greater than zero (example: %s)", text.Duration(def))
		return def
	}
	return d
}

func (r *reader) positiveInt(name string, def int) int {
	raw := r.str(name, "")
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		r.fail(name, raw, "not a whole number (example: %d)", def)
		return def
	}
	if n < 1 {
		r.fail(name, raw, "must be at least 1 (example: %d)", def)
		return def
	}
	return n
}

// listenAddr reads a host:port to listen on, or MetricsOff for none ("").
func (r *reader) listenAddr(name, def string) string {
	raw := r.str(name, def)
	if strings.EqualFold(raw, MetricsOff) {
		return ""
	}
	_, port, err := net.SplitHostPort(raw)
	if err != nil {
		r.fail(name, raw, "not a host:port to listen on (example: %s; %q for none)", def, MetricsOff)
		return ""
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		r.fail(name, raw, "port %q is not a number from 0 to 65535 (example: %s)", port, def)
		return ""
	}
	return raw
}

// tokens reads comma-separated token:principal pairs. Its errors name the
// variable and the entry by its position, and never show a token, nor a
// principal, which may be a token written in the wrong place.
func (r *reader) tokens(name string) []APIToken {
	raw := r.lookup(name)
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	var tokens []APIToken
	seen := map[string]int{}
	entry := 0
	for _, item := range strings.Split(raw, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		entry++
		fail := func(format string, args ...any) {
			r.errs = append(r.errs, fmt.Errorf("%s: entry %d (not shown): %s", name, entry, fmt.Sprintf(format, args...)))
		}
		token, principal, ok := strings.Cut(item, ":")
		principal, rolesText, hasRoles := strings.Cut(principal, ":")
		token, principal = strings.TrimSpace(token), strings.TrimSpace(principal)
		roles, teams, badRole := parseRoles(rolesText, hasRoles)
		switch {
		case !ok:
			fail("not a token:principal pair")
		case token == "":
			fail("the token before ':' is empty")
		case principal == "":
			fail("the principal after ':' is empty")
		case len(token) < MinTokenLength:
			fail("the token is %d characters long; it must have at least %d", len(token), MinTokenLength)
		case !tokenPattern.MatchString(token):
			fail("the token may hold only letters, digits and -._~+/ (then '=' padding)")
		case CheckPerson(principal) != nil:
			fail("%v", CheckPerson(principal))
		case badRole > 0:
			// Not shown either: a token written in the wrong place would be.
			fail("role %d after the second ':' is neither a permission (%s) nor a team role's name (a lowercase letter, then up to 31 lowercase letters, digits, '-' or '_'); roles are joined by '+'", badRole, strings.Join(AllRoles, ", "))
		case len(teams) > 0 && !slices.ContainsFunc(strings.Split(rolesText, "+"), func(w string) bool { return slices.Contains(AllRoles, strings.TrimSpace(w)) }):
			// A misspelt permission would read as a team role and leave
			// the token the default permissions: more than was meant.
			fail("its roles name team roles but no permission: write its permissions too (%s), e.g. approve+%s", strings.Join(AllRoles, ", "), teams[0])
		case seen[token] > 0:
			fail("the same token as entry %d", seen[token])
		default:
			seen[token] = entry
			tokens = append(tokens, APIToken{Token: token, Principal: principal, Roles: roles, Teams: teams})
		}
	}
	if entry == 0 {
		r.errs = append(r.errs, fmt.Errorf("%s: no token:principal pairs in the list", name))
	}
	return tokens
}

// temporal loads the standard Temporal client configuration (a profile
// of temporal.toml when there is one, then the TEMPORAL_* variables) with
// envconfig, which tollgate does not reimplement; where it names no
// address or namespace, tollgate's defaults (address, namespace) apply.
func (r *reader) temporal(address, namespace string) client.Options {
	opts, err := envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{EnvLookup: lookupEnv{r.lookup}})
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("the Temporal client configuration (TEMPORAL_* variables, %s): %w", cmp.Or(r.lookup("TEMPORAL_CONFIG_FILE"), envconfig.DefaultConfigFilePath()), err))
		return client.Options{HostPort: address, Namespace: namespace}
	}
	if r.lookup(EnvTemporalAddress) != "" || opts.HostPort == "" {
		opts.HostPort = address
	}
	if r.lookup(EnvTemporalNamespace) != "" || opts.Namespace == "" {
		opts.Namespace = namespace
	}
	if r.oneOf(EnvGRPCCompression, GRPCCompressionGzip, GRPCCompressionGzip, GRPCCompressionNone) == GRPCCompressionNone {
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
	return opts
}

// Values of EnvGRPCCompression.
const (
	GRPCCompressionGzip = "gzip"
	GRPCCompressionNone = "none"
)

// lookupEnv gives envconfig the variables as tollgate reads them: the
// environment, then the configuration file (which holds only the keys in
// known, so the SDK's TLS, API key and profile variables come from the
// environment alone).
type lookupEnv struct{ lookup func(string) string }

func (l lookupEnv) LookupEnv(name string) (string, bool) {
	v := l.lookup(name)
	return v, v != ""
}

// Environ lists the variables envconfig scans by prefix (gRPC metadata
// headers): from the environment only.
func (l lookupEnv) Environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "TEMPORAL_") {
			out = append(out, name+"="+l.lookup(name))
		}
	}
	return out
}

// parseRoles reads a token's roles, role+role...: its permissions (words
// of AllRoles; DefaultRoles when none is written, which the token list
// refuses for a token that names team roles) and its team roles (any
// other word that is a team's name), each sorted. bad, when not 0, is the
// position of the first word that is neither.
func parseRoles(text string, written bool) (roles, teams []string, bad int) {
	if written {
		for i, role := range strings.Split(text, "+") {
			switch role = strings.TrimSpace(role); {
			case slices.Contains(AllRoles, role):
				roles = append(roles, role)
			case teamPattern.MatchString(role):
				teams = append(teams, role)
			default:
				return nil, nil, i + 1
			}
		}
	}
	if roles == nil {
		roles = slices.Clone(DefaultRoles)
	}
	slices.Sort(roles)
	slices.Sort(teams)
	return slices.Compact(roles), slices.Compact(teams), 0
}

// boolean reads true or false; unset is false.
func (r *reader) boolean(name string) bool {
	v := r.str(name, "false")
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, v, "not true or false")
	}
	return b
}

// origins reads a list of browser origins, scheme://host[:port] each.
func (r *reader) origins(name string) []string {
	var out []string
	for _, o := range strings.Split(r.str(name, ""), ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		u, err := neturl.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			r.fail(name, o, "not an origin: scheme://host[:port], without a path (example: https://console.example.com)")
			continue
		}
		out = append(out, u.Scheme+"://"+u.Host)
	}
	return out
}

func (r *reader) level(name string, def slog.Level) slog.Level {
	raw := r.str(name, "")
	if raw == "" {
		return def
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(raw)); err != nil {
		r.fail(name, raw, "not a log level (one of debug, info, warn, error)")
		return def
	}
	return l
}

// FastGzip makes this process gzip its requests to Temporal (with
// TOLLGATE_GRPC_COMPRESSION=gzip, the default) at gzip's fastest level
// rather than its default one. Most of what the default level costs a
// small message is resetting the compressor's tables: a 1.7 KB request
// took 28 µs to compress against 6 µs, and came out 136 bytes against 145.
// Every request a worker or an API makes is such a message. grpc-go lets
// the level change only before any client is made: call it from an init
// function of a main package.
func FastGzip() {
	if err := grpcgzip.SetLevel(gzip.BestSpeed); err != nil {
		panic(err) // BestSpeed is a valid level
	}
}
