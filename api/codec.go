package main

import (
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"
	"go.temporal.io/sdk/converter"

	"github.com/tollgate/tollgate/internal/config"
)

// codecPath is where the API serves Temporal's remote codec protocol
// (POST codecPath+"/decode" and "/encode"): the Web UI and the CLI
// (--codec-endpoint) read through it what the payload store keeps out of
// history.
const codecPath = "/codec"

// codecBodyBytes bounds a codec request: the payloads of one history event,
// which Temporal bounds at 2 MiB, with room for their JSON encoding.
const codecBodyBytes = 4 << 20

// serveCodec registers the codec endpoint, and the CORS preflight a browser
// sends before the Web UI, served from another origin, may call it; read
// admits the callers who may read a turn.
func (s *Server) serveCodec(r *gin.Engine, codec converter.PayloadCodec, read gin.HandlerFunc) {
	h := converter.NewPayloadCodecHTTPHandler(codec)
	serve := func(c *gin.Context) {
		s.allowCodecOrigin(c)
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, codecBodyBytes)
		h.ServeHTTP(c.Writer, c.Request)
	}
	r.POST(codecPath+"/decode", read, serve)
	r.POST(codecPath+"/encode", read, serve)
	r.OPTIONS(codecPath+"/*op", func(c *gin.Context) {
		if !s.allowCodecOrigin(c) {
			c.AbortWithStatus(http.StatusForbidden)
			return
		}
		c.Header("Access-Control-Allow-Methods", "POST")
		c.Header("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
		c.Header("Access-Control-Max-Age", "600")
		c.Status(http.StatusNoContent)
	})
}

// readRoles may read a turn: its events, its transcript, and its payloads
// through the codec endpoint.
var readRoles = []string{config.RoleChat, config.RoleApprove}

// allowCodecOrigin answers CORS for the codec endpoint: a browser origin
// listed in TOLLGATE_CODEC_ORIGINS (the Web UI's) may read its answers.
func (s *Server) allowCodecOrigin(c *gin.Context) bool {
	origin := c.GetHeader("Origin")
	if origin == "" || !slices.Contains(s.codecOrigins, origin) {
		return false
	}
	c.Header("Access-Control-Allow-Origin", origin)
	c.Header("Access-Control-Allow-Credentials", "true")
	c.Header("Vary", "Origin")
	return true
}
