package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// principalKey is where authenticate leaves the caller's principal in the
// request's gin context.
const principalKey = "tollgate.principal"

// bearerChallenge is the WWW-Authenticate header of every 401 answer.
const bearerChallenge = `Bearer realm="tollgate"`

// authenticator knows the API's bearer tokens by their SHA-256 digests. A
// presented token is hashed and compared in constant time with every known
// digest, without stopping at a match, so the time an answer takes says
// nothing about how close a guess came or which token matched.
type authenticator struct {
	digests    [][sha256.Size]byte
	principals []string
}

// newAuthenticator returns the authenticator of tokens (token → principal),
// or nil when there are none: then the API asks for no token.
func newAuthenticator(tokens map[string]string) *authenticator {
	if len(tokens) == 0 {
		return nil
	}
	a := &authenticator{}
	for _, tok := range slices.Sorted(maps.Keys(tokens)) {
		a.digests = append(a.digests, sha256.Sum256([]byte(tok)))
		a.principals = append(a.principals, tokens[tok])
	}
	return a
}

// errNoToken and errBadToken are the two ways a request fails
// authentication; their messages are what the client reads.
var (
	errNoToken  = errors.New("authorization required: send the header Authorization: Bearer <token>")
	errBadToken = errors.New("the bearer token is not valid")
)

// principal returns the principal of the Authorization header's bearer
// token. Its errors wrap errNoToken (nothing usable was sent: no header,
// another scheme, no token) or errBadToken (an unknown token); neither
// repeats what was sent.
func (a *authenticator) principal(header string) (string, error) {
	scheme, token, _ := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	switch {
	case header == "":
		return "", errNoToken
	case !strings.EqualFold(scheme, "Bearer"):
		return "", &unauthorizedError{cause: errNoToken, msg: "the Authorization header is not a bearer token: send Authorization: Bearer <token>"}
	case token == "":
		return "", &unauthorizedError{cause: errNoToken, msg: "the Authorization header holds no token after Bearer"}
	}
	digest := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.digests {
		if subtle.ConstantTimeCompare(digest[:], a.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", errBadToken
	}
	return a.principals[found], nil
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
	return errors.Is(err, errNoToken) || errors.Is(err, errBadToken)
}

// publicRoutes are what a request without a token may reach: the health
// check, for load balancers, and the console's static pages and assets,
// which hold no data and which a browser loads without headers; the pages
// then send the token the user typed with every API call.
var publicRoutes = []string{"/healthz", consolePath, inboxPath, assetsPath + "*file"}

// authenticate lets a request through when the API asks for no token, when
// it is a GET of a public route, or when it carries a known bearer token,
// whose principal it leaves in the context. Anything else is answered 401.
func (s *Server) authenticate(c *gin.Context) {
	if s.auth == nil || (c.Request.Method == http.MethodGet && slices.Contains(publicRoutes, c.FullPath())) {
		return
	}
	p, err := s.auth.principal(c.GetHeader("Authorization"))
	if err != nil {
		challenge := bearerChallenge
		if errors.Is(err, errBadToken) {
			challenge += `, error="invalid_token"`
		}
		c.Header("WWW-Authenticate", challenge)
		writeError(c, s.log, err)
		return
	}
	c.Set(principalKey, p)
}

// principal is the caller's principal: the name of its token, or "" when
// the API asks for none.
func principal(c *gin.Context) string {
	return c.GetString(principalKey)
}
