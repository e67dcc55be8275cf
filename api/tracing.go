package main

import (
	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/internal/telemetry"
)

// untracedRoutes are probed every few seconds and lead nowhere: a span of
// each would bury the traces of turns.
var untracedRoutes = map[string]bool{"/healthz": true, "/metrics": true}

// traceRequests is the middleware that makes a server span of each request
// with tp, continuing the caller's trace when it sends one (traceparent).
// Streams are traced too: their span lasts as long as the stream, and
// costs nothing more while it is open.
func traceRequests(tp trace.TracerProvider) gin.HandlerFunc {
	return otelgin.Middleware(telemetry.APIService,
		otelgin.WithTracerProvider(tp),
		otelgin.WithGinFilter(func(c *gin.Context) bool { return !untracedRoutes[c.FullPath()] }),
	)
}
