package activities

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/protocol"
)

// MCPConfig is an MCP configuration file in the format Claude Code reads
// from .mcp.json:
//
//	{"mcpServers": {
//	  "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "./workspace"]},
//	  "search": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}}
//	}}
//
// Strings may name environment variables as ${VAR}, or ${VAR:-default}
// for a value when VAR is unset or empty, as Claude Code expands them.
type MCPConfig struct {
	// Servers are the servers by name, in name order.
	Servers []MCPServerConfig
	// Dir is the folder of the file: stdio servers run in it, so that
	// relative paths in their arguments mean what they mean to its author.
	Dir string
	// Workspace is the tools' workspace (the worker's), which the
	// arguments a server's workspacePaths name are confined to.
	Workspace string
}

// MCPServerConfig is one server of an MCPConfig.
type MCPServerConfig struct {
	// Name is the server's key in mcpServers; its tools are offered as
	// mcp__<Name>__<tool>.
	Name string `json:"-"`
	// Type is stdio (the default when Command is set), http (streamable
	// HTTP) or sse (the older HTTP+SSE transport).
	Type string `json:"type"`
	// Command, Args and Env start a stdio server. It gets Env on top of a
	// few variables a program needs to run (PATH, HOME, ...), never the
	// rest of the worker's environment, which holds its secrets.
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	// URL and Headers reach an HTTP server.
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	// WorkspacePaths names, by the server's own tool name, the arguments
	// that name a file of the workspace (server-filesystem's write_file
	// takes "path"): MCP's schemas cannot say that an argument is a path,
	// so the configuration does. Those arguments are read as the
	// built-in file tools' are: made relative to the workspace, refused
	// when they leave it, and resolved through its symbolic links before
	// the policy, a grant, the person and the ledger see the call; the
	// server gets the same file, as an absolute path.
	WorkspacePaths map[string][]string `json:"workspacePaths"`

	// expanded are the values ${VAR} took from the environment, which
	// Redact hides.
	expanded []expansion
}

// expansion is a value a ${VAR} of the configuration took.
type expansion struct{ name, value string }

// minRedacted is the shortest expanded value Redact hides: a shorter one
// (a flag, a digit) is no secret, and hiding it everywhere would garble
// the message.
const minRedacted = 4

// Redact hides, in a message about the server (an error, a log line, what
// it wrote to stderr), every value its configuration took from the
// environment, as written and as a URL would escape it: each becomes the
// ${VAR} it came from. A token in args or a url (a query parameter, say)
// is then never in the worker's errors, its log or a tool's result.
func (s MCPServerConfig) Redact(text string) string {
	var pairs []string
	for _, e := range s.expanded {
		for _, v := range []string{e.value, url.QueryEscape(e.value), url.PathEscape(e.value)} {
			pairs = append(pairs, v, "${"+e.name+"}")
		}
	}
	if len(pairs) == 0 {
		return text
	}
	return strings.NewReplacer(pairs...).Replace(text)
}

// MCP server transports.
const (
	MCPStdio = "stdio"
	MCPHTTP  = "http"
	MCPSSE   = "sse"
)

// maxToolName is the longest function name OpenAI-compatible servers take.
const maxToolName = 64

// serverNamePattern is what a server's name may be: it becomes part of
// tool names, which models take only in this alphabet.
var serverNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// LoadMCPConfig reads the MCP configuration file at path, expanding
// environment variables with getenv. Every problem is reported, each naming
// the server and the key.
func LoadMCPConfig(path string, getenv func(string) string) (MCPConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return MCPConfig{}, fmt.Errorf("MCP configuration: %w", err)
	}
	cfg, err := ParseMCPConfig(data, getenv)
	if err != nil {
		return MCPConfig{}, fmt.Errorf("MCP configuration %s: %w", path, err)
	}
	cfg.Dir = dirOf(path)
	return cfg, nil
}

// ParseMCPConfig reads an MCP configuration (see MCPConfig).
func ParseMCPConfig(data []byte, getenv func(string) string) (MCPConfig, error) {
	var file struct {
		Servers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return MCPConfig{}, err
	}
	var cfg MCPConfig
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(file.Servers)) {
		s, err := parseServer(name, file.Servers[name], getenv)
		if err != nil {
			errs = append(errs, fmt.Errorf("server %q: %w", name, err))
			continue
		}
		cfg.Servers = append(cfg.Servers, s)
	}
	return cfg, errors.Join(errs...)
}

func parseServer(name string, raw json.RawMessage, getenv func(string) string) (MCPServerConfig, error) {
	var s MCPServerConfig
	if !serverNamePattern.MatchString(name) || strings.Contains(name, "__") {
		return s, errors.New("a server's name may hold only letters, digits, _ and - (and no __): it becomes part of its tools' names")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, err
	}
	s.Name = name
	if s.Type == "" {
		s.Type = MCPStdio
		if s.Command == "" && s.URL != "" {
			s.Type = MCPHTTP
		}
	}
	ex := expander{getenv: getenv}
	s.Command = ex.expand("command", s.Command)
	s.URL = ex.expand("url", s.URL)
	for i := range s.Args {
		s.Args[i] = ex.expand(fmt.Sprintf("args[%d]", i), s.Args[i])
	}
	for k, v := range s.Env {
		s.Env[k] = ex.expand("env."+k, v)
	}
	for k, v := range s.Headers {
		s.Headers[k] = ex.expand("headers."+k, v)
	}
	s.expanded = ex.expanded
	switch s.Type {
	case MCPStdio:
		if s.Command == "" {
			ex.errs = append(ex.errs, errors.New("command is required for a stdio server"))
		}
		if s.URL != "" || len(s.Headers) > 0 {
			ex.errs = append(ex.errs, errors.New("url and headers are for http servers, not stdio ones"))
		}
	case MCPHTTP, MCPSSE:
		if s.URL == "" {
			ex.errs = append(ex.errs, fmt.Errorf("url is required for an %s server", s.Type))
		}
		if s.Command != "" || len(s.Args) > 0 || len(s.Env) > 0 {
			ex.errs = append(ex.errs, fmt.Errorf("command, args and env are for stdio servers, not %s ones", s.Type))
		}
	default:
		ex.errs = append(ex.errs, fmt.Errorf("type %q is not one of stdio, http, sse", s.Type))
	}
	return s, errors.Join(ex.errs...)
}

// expander expands ${VAR} and ${VAR:-default}, collecting the variables
// that are unset and have no default.
type expander struct {
	getenv func(string) string
	errs   []error
	// expanded are the values taken from the environment, longest first,
	// for Redact.
	expanded []expansion
}

var variablePattern = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

func (e *expander) expand(key, s string) string {
	return variablePattern.ReplaceAllStringFunc(s, func(ref string) string {
		m := variablePattern.FindStringSubmatch(ref)
		if v := e.getenv(m[1]); v != "" {
			if len(v) >= minRedacted && !slices.ContainsFunc(e.expanded, func(x expansion) bool { return x.value == v }) {
				e.expanded = append(e.expanded, expansion{name: m[1], value: v})
				// Longest first: a value inside another is hidden
				// after it, not in the middle of it.
				slices.SortStableFunc(e.expanded, func(a, b expansion) int { return len(b.value) - len(a.value) })
			}
			return v
		}
		if m[2] != "" {
			return m[3]
		}
		e.errs = append(e.errs, fmt.Errorf("%s names ${%s}, which is not set (write ${%s:-default} for a default)", key, m[1], m[1]))
		return ""
	})
}

// MCPToolName is the name under which a server's tool is offered: the
// tool's name with every character a model does not take in a function
// name made _, after mcp__<server>__.
func MCPToolName(server, tool string) string {
	clean := strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, tool)
	return protocol.MCPToolPrefix + server + "__" + clean
}
