package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
)

// callerKey is where authenticate leaves the caller's token (its
// principal and roles) in the request's gin context.
const callerKey = "tollgate.caller"

// bearerChallenge is the WWW-Authenticate header of every 401 answer.
const bearerChallenge = `Bearer realm="tollgate"`

// authenticator knows the API's bearer tokens by their SHA-256 digests. A
// presented token is hashed and compared in constant time with every known
// digest, without stopping at a match, so the time an answer takes says
// nothing about how close a guess came or which token matched.
type authenticator struct {
	digests [][sha256.Size]byte
	callers []config.APIToken
}

// newAuthenticator returns the authenticator of tokens, or nil when there
// are none: then the API asks for no token.
func newAuthenticator(tokens []config.APIToken) *authenticator {
	if len(tokens) == 0 {
		return nil
	}
	a := &authenticator{}
	for _, tok := range tokens {
		a.digests = append(a.digests, sha256.Sum256([]byte(tok.Token)))
		tok.Token = "" // only its digest is kept
		a.callers = append(a.callers, tok)
	}
	return a
}

// errNoToken and errBadToken are the two ways a request fails
// authentication; their messages are what the client reads.
var (
	errNoToken  = errors.New("authorization required: send the header Authorization: Bearer <token>")
	errBadToken = errors.New("the bearer token is not valid")
)

// caller returns the token of the Authorization header's bearer token, its
// secret left out. Its errors wrap errNoToken (nothing usable was sent: no
// header, another scheme, no token) or errBadToken (an unknown token);
// neither repeats what was sent.
func (a *authenticator) caller(header string) (config.APIToken, error) {
	scheme, token, _ := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	switch {
	case header == "":
		return config.APIToken{}, errNoToken
	case !strings.EqualFold(scheme, "Bearer"):
		return config.APIToken{}, &unauthorizedError{cause: errNoToken, msg: "the Authorization header is not a bearer token: send Authorization: Bearer <token>"}
	case token == "":
		return config.APIToken{}, &unauthorizedError{cause: errNoToken, msg: "the Authorization header holds no token after Bearer"}
	}
	digest := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.digests {
		if subtle.ConstantTimeCompare(digest[:], a.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return config.APIToken{}, errBadToken
	}
	return a.callers[found], nil
}

// unauthorizedError is an authentication failure with a more precise
// message than its cause's.
type unauthorizedError struct {
	cause error
	msg   string
}

func (e *unauthorizedError) Error() string { return e.msg }
func (e *unauthorizedError) Unwrap() error { return e.cause }

// isUnauthorized reports whether err is an authentication failure.
func isUnauthorized(err error) bool {
	return errors.Is(err, errNoToken) || errors.Is(err, errBadToken) || errors.Is(err, errBadSlackSignature)
}

// publicRoutes are what a request without a token may reach: the health
// check, for load balancers, the console's static pages and assets,
// which hold no data and which a browser loads without headers (the pages
// then send the token the user typed with every API call), and the
// decision links, each its own credential (its signature), and Slack's
// callbacks, which Slack signs.
var publicRoutes = []string{
	"GET /healthz", "GET " + consolePath, "GET " + inboxPath, "GET " + ledgerPath, "GET " + assetsPath + "*file",
	"GET " + links.Path, "POST " + links.Path, "POST " + protocol.SlackInteractionsPath,
}

// public reports whether a request may come without a token.
func public(c *gin.Context) bool {
	return slices.Contains(publicRoutes, c.Request.Method+" "+c.FullPath())
}

// authenticate lets a request through when the API asks for no token, when
// it is a GET of a public route, or when it carries a known bearer token,
// which it leaves in the context. Anything else is answered 401.
func (s *Server) authenticate(c *gin.Context) {
	if s.auth == nil || public(c) {
		return
	}
	if c.Request.Method == http.MethodOptions {
		return // a CORS preflight carries no credentials; its answer grants nothing
	}
	caller, err := s.auth.caller(c.GetHeader("Authorization"))
	if err != nil {
		challenge := bearerChallenge
		if errors.Is(err, errBadToken) {
			challenge += `, error="invalid_token"`
		}
		c.Header("WWW-Authenticate", challenge)
		writeError(c, s.log, err)
		return
	}
	c.Set(callerKey, caller)
}

// caller is the token the caller authenticated with; false when the API
// asks for none.
func caller(c *gin.Context) (config.APIToken, bool) {
	v, ok := c.Get(callerKey)
	if !ok {
		return config.APIToken{}, false
	}
	tok, ok := v.(config.APIToken)
	return tok, ok
}

// principal is the caller's principal: the name of its token, or "" when
// the API asks for none.
func principal(c *gin.Context) string {
	tok, _ := caller(c)
	return tok.Principal
}

// callerRole is the role the caller acts in for something that needs
// role: role itself, or admin when that is how the caller may; "" when the
// API asks for no token.
func callerRole(c *gin.Context, role string) string {
	tok, ok := caller(c)
	switch {
	case !ok:
		return ""
	case !slices.Contains(tok.Roles, role) && slices.Contains(tok.Roles, config.RoleAdmin):
		return config.RoleAdmin
	default:
		return role
	}
}

// errForbidden is the cause of every 403: the caller may not do this.
var errForbidden = errors.New("forbidden")

// forbidden returns an error wrapping errForbidden with a message that
// says what was refused and why.
func forbidden(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errForbidden, fmt.Sprintf(format, args...))
}

// may reports whether the caller may act in one of roles. An API without
// tokens lets every caller do everything but bypass (see mayBypass).
func (s *Server) may(c *gin.Context, roles ...string) bool {
	tok, ok := caller(c)
	if !ok {
		return s.auth == nil
	}
	return slices.ContainsFunc(roles, tok.Has)
}

// requireRole answers 403 to a caller that may act in none of roles.
func (s *Server) requireRole(roles ...string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.may(c, roles...) {
			writeError(c, s.log, forbidden("%s %s needs a token with the role %s", c.Request.Method, c.FullPath(), strings.Join(roles, " or ")))
		}
	}
}

// mayBypass reports whether the caller may send bypassApproval: with
// tokens, a token with the bypass role; without, only when the operator
// allowed it (TOLLGATE_ALLOW_BYPASS).
func (s *Server) mayBypass(c *gin.Context) bool {
	if s.auth == nil {
		return s.allowBypass
	}
	return s.may(c, config.RoleBypass)
}
