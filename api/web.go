package main

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"
)

// webFiles are the web console and the approvals inbox: plain HTML, CSS
// and JavaScript, embedded in the binary and served as they are, with no
// build step.
//
//go:embed web/*.html web/*.js web/*.css
var webFiles embed.FS

// Paths of the web pages and their assets.
const (
	consolePath = "/"
	inboxPath   = "/inbox"
	ledgerPath  = "/ledger"
	assetsPath  = "/web/"
)

// webPolicy lets the pages load only their own files and talk only to this
// API: no inline script, nothing from elsewhere.
const webPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// registerWeb serves the console at /, the inbox at /inbox, the audit
// ledger at /ledger and their assets under /web/.
func registerWeb(r *gin.Engine) {
	r.GET(consolePath, webFile("index.html"))
	r.GET(inboxPath, webFile("inbox.html"))
	r.GET(ledgerPath, webFile("ledger.html"))
	r.GET(assetsPath+"*file", func(c *gin.Context) {
		name := strings.TrimPrefix(c.Param("file"), "/")
		if strings.HasSuffix(name, ".html") {
			// The pages have their own paths.
			name = ""
		}
		webFile(name)(c)
	})
}

// webFile serves one embedded file. The files are small and change with
// the binary, so browsers are told to check again rather than cache.
func webFile(name string) gin.HandlerFunc {
	return func(c *gin.Context) {
		data, err := fs.ReadFile(webFiles, path.Join("web", name))
		if name == "" || err != nil {
			c.JSON(http.StatusNotFound, gin.H{"error": "no such file: " + c.Request.URL.Path})
			return
		}
		h := c.Writer.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", webPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		c.Data(http.StatusOK, webContentType(name), data)
	}
}

// webContentType is the media type of an embedded file by its extension.
func webContentType(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}
