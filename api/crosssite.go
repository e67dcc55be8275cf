package main

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
)

// errUnsupportedMediaType is the cause of every 415.
var errUnsupportedMediaType = errors.New("unsupported media type")

// refuseCrossSite guards every state-changing request (anything but GET,
// HEAD and OPTIONS) against being sent by a web page the user happens to
// visit. A page may POST a form or a text/plain body to any address with no
// CORS preflight, and the browser sends the user's cookies and reaches
// loopback; it cannot send application/json without a preflight, which
// this API answers only for the codec endpoint and its listed origins, and
// it cannot hide its Origin. So: a body must be
// application/json (415 otherwise), and a request whose Origin is neither
// the API's own nor on the allow-list is refused (403). A request with no
// Origin comes from a program (curl, the terminal client), not a page.
func (s *Server) refuseCrossSite(c *gin.Context) {
	switch c.Request.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return
	}
	if origin := c.GetHeader("Origin"); origin != "" && !s.originAllowed(c.Request, origin) &&
		!(strings.HasPrefix(c.Request.URL.Path, codecPath+"/") && slices.Contains(s.codecOrigins, origin)) {
		writeError(c, s.log, forbidden("a request from origin %.100q may not change anything here: only the API's own origin, or one listed in %s, may", origin, config.EnvAllowedOrigins))
		return
	}
	if c.Request.URL.Path == protocol.SlackInteractionsPath && c.Request.Method == http.MethodPost {
		// Slack posts a form, from its servers (no Origin, so the check
		// above lets it by): only its signature, which the handler
		// checks, lets a callback decide, and a page cannot make one.
		return
	}
	if c.Request.URL.Path == links.Path && c.Request.Method == http.MethodPost {
		// The link page's form: a page elsewhere could post it only with
		// a signed link, which decides by itself anyway; the Origin check
		// above still applies.
		return
	}
	if c.Request.Method == http.MethodPost || c.Request.ContentLength > 0 {
		mediaType, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
		if err != nil || mediaType != "application/json" {
			writeError(c, s.log, fmt.Errorf("%w: send the body as Content-Type: application/json, not %.100q", errUnsupportedMediaType, c.GetHeader("Content-Type")))
			return
		}
	}
}

// refuseForeignHost guards an API without tokens against DNS rebinding: a
// page on a name its owner re-points at 127.0.0.1 is, to the browser, its
// own origin, so the Origin check would let it read and decide. Such a
// request names that page's host, so an API without tokens answers only
// requests addressed to a loopback name (localhost, 127.0.0.0/8, ::1),
// unless the operator serves it beyond loopback on purpose (AnyHost).
func (s *Server) refuseForeignHost(c *gin.Context) {
	if s.auth != nil || s.anyHost || loopbackHost(c.Request.Host) {
		return
	}
	writeError(c, s.log, forbidden("this API has no tokens and answers only requests addressed to 127.0.0.1, [::1] or localhost, not %.100q: set %s to serve it under other names",
		c.Request.Host, config.EnvAPITokens))
}

// loopbackHost reports whether a Host header names this machine's loopback.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// originAllowed reports whether a browser origin may send state-changing
// requests: the API's own origin (the console's pages), or one the operator
// listed. "null" (a sandboxed page, a file) never is.
func (s *Server) originAllowed(r *http.Request, origin string) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return origin == scheme+"://"+r.Host || slices.Contains(s.allowedOrigins, origin)
}
