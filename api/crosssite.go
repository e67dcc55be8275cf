package main

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// errUnsupportedMediaType is the cause of every 415.
var errUnsupportedMediaType = errors.New("unsupported media type")

// refuseCrossSite guards every state-changing request (anything but GET,
// HEAD and OPTIONS) against being sent by a web page the user happens to
// visit. A page may POST a form or a text/plain body to any address with no
// CORS preflight, and the browser sends the user's cookies and reaches
// loopback; it cannot send application/json without a preflight, which
// this API never answers, and it cannot hide its Origin. So: a body must be
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
		writeError(c, s.log, forbidden("a request from origin %.100q may not change anything here: only the API's own origin, or one listed in TOLLGATE_ALLOWED_ORIGINS, may", origin))
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
