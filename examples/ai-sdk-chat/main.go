// Command ai-sdk-chat serves the example chat page: a plain page that
// talks to tollgate through the AI SDK's own client (the `ai` package's
// AbstractChat and DefaultChatTransport, as useChat does), with no build
// step. docs/ai-sdk.md has what the page sees.
//
//	ai-sdk-chat -addr 127.0.0.1:8070 -api http://127.0.0.1:8080 [-dir examples/ai-sdk-chat]
//
// It serves the page's files from dir, the SDK's ES modules as npm put
// them in dir/node_modules (`make ai-sdk` installs them, pinned by the
// folder's package-lock.json), and forwards /ai-sdk/ to the API, so that
// the page and the API are one origin to the browser, as an app's own
// server in front of tollgate makes them. The request keeps the browser's
// Host, so the API's check of the Origin (docs/security.md) sees the page's
// own origin; an API with tokens still wants one, which the page asks for.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8070", "address to listen on")
	api := flag.String("api", "http://127.0.0.1:8080", "tollgate's API, where /ai-sdk/ goes")
	dir := flag.String("dir", "examples/ai-sdk-chat", "the example's folder: its page, and node_modules with the AI SDK")
	flag.Parse()

	if err := run(*addr, *api, *dir); err != nil {
		slog.Error("AI SDK example stopped", "error", err)
		os.Exit(1)
	}
}

func run(addr, api, dir string) error {
	target, err := url.Parse(api)
	if err != nil || target.Scheme == "" || target.Host == "" {
		return fmt.Errorf("-api %q is not an http(s) URL", api)
	}
	h, err := newHandler(dir, target)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("AI SDK example listening", "url", "http://"+addr, "api", api)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// pageFiles are the page's own files, by the path they are served at.
var pageFiles = map[string]string{
	"/":               "index.html",
	"/chat.js":        "chat.js",
	"/style.css":      "style.css",
	"/vercel-oidc.js": "vercel-oidc.js",
}

// importMap is the page's inline import map, whose hash the page's
// Content-Security-Policy names as the one inline script it may run.
var importMap = regexp.MustCompile(`(?s)<script type="importmap">(.*?)</script>`)

// newHandler serves the page from dir, the SDK's modules from
// dir/node_modules, and forwards /ai-sdk/ to api.
func newHandler(dir string, api *url.URL) (http.Handler, error) {
	index, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		return nil, fmt.Errorf("the example's page: %w (-dir names the folder of index.html)", err)
	}
	m := importMap.FindSubmatch(index)
	if m == nil {
		return nil, fmt.Errorf("%s has no import map", filepath.Join(dir, "index.html"))
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ai", "package.json")); err != nil {
		return nil, fmt.Errorf("the AI SDK is missing from %s: `make ai-sdk` installs it (it needs npm)", filepath.Join(dir, "node_modules"))
	}
	sum := sha256.Sum256(m[1])
	policy := "default-src 'self'; script-src 'self' 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"style-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

	mux := http.NewServeMux()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(api)
			r.Out.Host = r.In.Host // the page's origin is the API's, to the API
			r.SetXForwarded()
		},
		FlushInterval: -1, // a stream's every chunk as it comes
	}
	mux.Handle("/ai-sdk/", proxy)
	modules := http.FileServer(http.Dir(filepath.Join(dir, "node_modules")))
	mux.Handle("GET /node_modules/", http.StripPrefix("/node_modules", onlyModules(modules)))
	for at, name := range pageFiles {
		file := filepath.Join(dir, name)
		pattern := "GET " + at
		if at == "/" {
			pattern += "{$}"
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", policy)
			w.Header().Set("Cache-Control", "no-cache")
			http.ServeFile(w, r, file)
		})
	}
	return mux, nil
}

// onlyModules serves the JavaScript files of node_modules and nothing
// else: no listings, no package's other files.
func onlyModules(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if path.Ext(r.URL.Path) != ".js" || strings.Contains(r.URL.Path, "..") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		next.ServeHTTP(w, r)
	})
}
