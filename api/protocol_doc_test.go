package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/docstest"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// protocolDoc is the wire protocol's reference, which these tests hold to
// the server.
const protocolDoc = "../docs/protocol.md"

// docRoute is one row of the reference's endpoints table.
type docRoute struct {
	method, path string
	// roles are the roles the row names; anyToken and public say the
	// route needs a token of any role, or none.
	roles            []string
	anyToken, public bool
}

func (r docRoute) String() string { return r.method + " " + r.path }

// docEndpoints reads the endpoints table: the rows, under "## Endpoints"
// and before its first subsection, whose first cell is an HTTP method.
func docEndpoints(t *testing.T, doc string) []docRoute {
	t.Helper()
	var out []docRoute
	for _, cells := range docstest.TableRows(docSection(t, doc, "## Endpoints", true)) {
		method := docstest.CodeSpans(cells[0])
		if len(method) != 1 || !httpMethod.MatchString(method[0]) {
			continue
		}
		require.Len(t, cells, 5, "endpoints row %v: method, path, role, request, response", cells)
		path := docstest.CodeSpans(cells[1])
		require.Len(t, path, 1, "endpoints row %v: one path", cells)
		role := strings.TrimSpace(cells[2])
		out = append(out, docRoute{
			method: method[0], path: path[0], roles: docstest.CodeSpans(role),
			anyToken: role == "any token", public: role == "none",
		})
	}
	require.NotEmpty(t, out, "no endpoints table in %s", protocolDoc)
	return out
}

var httpMethod = regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS)$`)

// docServer is the API as main builds it, with a payload store (so the
// codec routes are there) and, when given, tokens. Nothing the tests send
// reaches its Temporal client, which is nil.
func docServer(t *testing.T, tokens []config.APIToken) *Server {
	t.Helper()
	s := NewServer(Options{Tokens: tokens, Codec: payloads.Codec(converter.ExternalStorage{}, codecDecodeBytes)})
	t.Cleanup(s.Close)
	return s
}

func TestProtocolDocListsEveryRouteTheServerRegistersAndNoOther(t *testing.T) {
	doc := readProtocolDoc(t)
	var served []string
	for _, r := range docServer(t, nil).engine.Routes() {
		served = append(served, r.Method+" "+r.Path)
	}
	var documented []string
	for _, r := range docEndpoints(t, doc) {
		documented = append(documented, r.String())
	}
	slices.Sort(served)
	slices.Sort(documented)
	for _, r := range served {
		require.Contains(t, documented, r, "%s is a route: give it a row in the endpoints table of %s", r, protocolDoc)
	}
	for _, r := range documented {
		require.Contains(t, served, r, "the endpoints table of %s lists %s, which the server does not register", protocolDoc, r)
	}
	require.Len(t, documented, len(slices.Compact(slices.Clone(documented))), "a route is listed twice")

	headings := headingLines(doc)
	for _, r := range served {
		require.True(t, slices.ContainsFunc(headings, func(h string) bool {
			return strings.HasPrefix(h, "### ") && strings.Contains(h, "`"+r+"`")
		}), "%s has no subsection of its own (a heading naming `%s`) in %s", r, r, protocolDoc)
	}
}

// TestProtocolDocGivesEveryRouteTheRoleTheServerAsksFor sends each route a
// request with no token and with a token of each single role, and requires
// the answer (401, a 403 for the role, or past both) that the endpoints
// table's role column says.
func TestProtocolDocGivesEveryRouteTheRoleTheServerAsksFor(t *testing.T) {
	roles := []string{config.RoleChat, config.RoleApprove, config.RoleBypass}
	var tokens []config.APIToken
	for _, role := range roles {
		tokens = append(tokens, config.APIToken{Token: role + "-token-0123456789", Principal: role, Roles: []string{role}})
	}
	h := docServer(t, tokens).Handler()
	// Parameters chosen so that a request let through is answered before
	// the handler reaches Temporal: an id that is not a turn's, a
	// conversation id of the wrong shape, an empty decision.
	params := strings.NewReplacer(":turnId", "not-a-turn", ":conversationId", "bad%27id", ":grantId", "g", "*file", "missing.css", "*op", "decode")
	send := func(r docRoute, token string) (int, string) {
		var body *strings.Reader
		if r.method == http.MethodPost || r.method == http.MethodDelete {
			body = strings.NewReader(`{}`)
		} else {
			body = strings.NewReader("")
		}
		req := httptest.NewRequest(r.method, params.Replace(r.path)+"?conversationId=bad%27id", body)
		if body.Len() > 0 {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, r := range docEndpoints(t, readProtocolDoc(t)) {
		t.Run(r.String(), func(t *testing.T) {
			status, body := send(r, "")
			if r.public {
				require.NotEqual(t, http.StatusUnauthorized, status, "the table says %s needs no token: %s", r, body)
			} else {
				require.Equal(t, http.StatusUnauthorized, status, "the table says %s needs a token: %s", r, body)
			}
			if !r.public && !r.anyToken {
				require.NotEmpty(t, r.roles, "%s: the role column names no role, nor says any token or none", r)
			}
			for i, role := range roles {
				status, body := send(r, tokens[i].Token)
				refused := status == http.StatusForbidden && strings.Contains(body, "needs a token with the role")
				allowed := r.public || r.anyToken || slices.Contains(r.roles, role)
				require.Equal(t, !allowed, refused, "%s with a token of the role %s: the table says allowed=%v; the server answered %d %s", r, role, allowed, status, body)
			}
		})
	}
}

// TestProtocolDocNamesEveryFieldOfTheBodies requires every JSON field of
// the request and response bodies in the table of the section that
// describes it, and no field the body lacks.
func TestProtocolDocNamesEveryFieldOfTheBodies(t *testing.T) {
	doc := readProtocolDoc(t)
	for _, tc := range []struct {
		heading string
		types   []any
		// only lists some of the section's keys: the section's tables
		// hold other things too.
		subset bool
	}{
		{"### `POST /chat/stream`", []any{protocol.ChatRequest{}}, true},
		{"### `POST /chat/approval`", []any{protocol.ApprovalResult{}}, false},
		{"### `POST /chat/approvals`", []any{protocol.ApprovalBatchResult{}}, false},
		{"### `POST /chat/tool-result`", []any{protocol.ToolResultRequest{}}, false},
		{"### `GET /approvals`", []any{protocol.PendingApproval{}}, true},
		{"### `GET /conversations/:conversationId/grants`", []any{contract.Grant{}}, false},
		{"### `GET /conversations/:conversationId/messages`", []any{contract.MessagesPage{}, protocol.Message{}}, true},
		{"### `GET /conversations/:conversationId/turns`", []any{protocol.TurnList{}}, false},
		{"### `POST /conversations/:conversationId/compact`", []any{protocol.CompactResult{}}, false},
		{"### `POST /policy/test`, `POST /policy/check`", []any{protocol.PolicyTestRequest{}, protocol.PolicyReport{}}, false},
		{"### The decision body", []any{protocol.DecisionRequest{}, protocol.ApprovalDecision{}}, false},
		{"## Notices", []any{activities.Notice{}}, false},
	} {
		t.Run(tc.heading, func(t *testing.T) {
			keys := docstest.TableKeys(docSection(t, doc, tc.heading, false))
			var fields []string
			for _, v := range tc.types {
				for _, f := range jsonFields(reflect.TypeOf(v)) {
					require.Contains(t, keys, f, "%T has the field %q: name it in the table under %q", v, f, tc.heading)
					fields = append(fields, f)
				}
			}
			if !tc.subset {
				for _, k := range keys {
					require.Contains(t, fields, k, "the table under %q names %q, which no body has", tc.heading, k)
				}
			}
		})
	}
	// A client tool is a ToolSpec; clients send its first three fields.
	keys := docstest.TableKeys(docSection(t, doc, "### `POST /chat/stream`", false))
	for _, f := range jsonFields(reflect.TypeOf(protocol.ToolSpec{}))[:3] {
		require.Contains(t, keys, f)
	}
}

// TestProtocolDocJSONExamplesAreBodiesTheAPIReads decodes the example
// request bodies of the reference's curl commands as the API does.
func TestProtocolDocJSONExamplesAreBodiesTheAPIReads(t *testing.T) {
	doc := readProtocolDoc(t)
	bodies := regexp.MustCompile(`(?s)-X POST http://127\.0\.0\.1:8080(/chat/[a-z-]+).*?-d '([^']*)'`).FindAllStringSubmatch(doc, -1)
	require.NotEmpty(t, bodies)
	for _, b := range bodies {
		var dst any
		switch b[1] {
		case "/chat/stream":
			dst = &protocol.ChatRequest{}
		case "/chat/approval":
			_, err := parseApproval(strings.NewReader(b[2]))
			require.NoError(t, err, b[2])
			continue
		case "/chat/approvals":
			c, _ := gin.CreateTestContext(httptest.NewRecorder())
			c.Request = httptest.NewRequest(http.MethodPost, b[1], strings.NewReader(b[2]))
			_, _, err := parseBatch(c)
			require.NoError(t, err, b[2])
			continue
		case "/chat/tool-result":
			dst = &protocol.ToolResultRequest{}
		default:
			t.Fatalf("an example posts to %s", b[1])
		}
		dec := json.NewDecoder(strings.NewReader(b[2]))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(dst), "%s: %s", b[1], b[2])
	}
}

// jsonFields are the JSON names of t's fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

func readProtocolDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(protocolDoc)
	require.NoError(t, err)
	return string(b)
}

// docSection returns the text under heading (a whole line, "## Name"),
// up to the next heading of the same or a higher level, or, with
// ownTextOnly, up to the next heading of any level.
func docSection(t *testing.T, doc, heading string, ownTextOnly bool) string {
	t.Helper()
	level := strings.Index(heading, " ")
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, heading)
	require.GreaterOrEqual(t, start, 0, "%s has no heading %q", protocolDoc, heading)
	var out []string
	fenced := false
	for _, l := range lines[start+1:] {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(l, "#") {
			n := strings.Index(l, " ")
			if ownTextOnly || (n > 0 && n <= level) {
				break
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// headingLines are the Markdown headings of doc, outside code blocks.
func headingLines(doc string) []string {
	var out []string
	fenced := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
