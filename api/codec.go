package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

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

// codecDecodeBytes bounds what one codec request may decode: the stored
// payloads it names, counted each time it names one. A reference is a few
// dozen bytes and names a payload of up to megabytes, so without it a
// request of kilobytes would have the API read and send hundreds of
// megabytes. It is sixteen times Temporal's payload limit: the payloads
// of one history event, which is what the Web UI and the CLI ask for.
const codecDecodeBytes = 32 << 20

// errCodecBodyTooLarge answers a codec body past codecBodyBytes.
var errCodecBodyTooLarge = fmt.Errorf("%w: a codec request is at most %d MiB: send the payloads of fewer events at a time", errTooLarge, codecBodyBytes>>20)

// codecRole may use the codec endpoint. It reads any payload of any
// conversation whose reference (or content) the caller knows, which is
// what access to the Temporal namespace gives, and that is admin access
// (docs/security.md).
const codecRole = config.RoleAdmin

// serveCodec registers the codec endpoint, for callers with codecRole,
// and the CORS preflight a browser sends before the Web UI, served from
// another origin, may call it.
func (s *Server) serveCodec(r *gin.Engine, codec converter.PayloadCodec) {
	admin := s.requireRole(codecRole)
	r.POST(codecPath+"/decode", admin, s.codecHandler(codec.Decode))
	r.POST(codecPath+"/encode", admin, s.codecHandler(codec.Encode))
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

// codecHandler serves one operation of Temporal's remote codec protocol:
// the body is Payloads in protobuf JSON, and so is the answer. Failures
// are answered as every route's, through writeError.
func (s *Server) codecHandler(op func([]*commonpb.Payload) ([]*commonpb.Payload, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		s.allowCodecOrigin(c)
		body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, codecBodyBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeError(c, s.log, errCodecBodyTooLarge)
			return
		case err != nil:
			writeError(c, s.log, err)
			return
		}
		var in commonpb.Payloads
		if err := protojson.Unmarshal(body, &in); err != nil {
			writeError(c, s.log, badRequest("the body is not Temporal's Payloads in protobuf JSON: %v", err))
			return
		}
		out, err := op(in.GetPayloads())
		if err != nil {
			writeError(c, s.log, err)
			return
		}
		answer, err := protojson.Marshal(&commonpb.Payloads{Payloads: out})
		if err != nil {
			writeError(c, s.log, err)
			return
		}
		c.Data(http.StatusOK, "application/json", answer)
	}
}

// readRoles may read a turn: its events and its transcript.
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
