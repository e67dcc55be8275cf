package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/protocol"
)

// auditTimeout bounds one read of the ledger.
const auditTimeout = 10 * time.Second

// auditDecisions are the decisions GET /audit filters on.
var auditDecisions = map[string]bool{protocol.DecisionApprove: true, protocol.DecisionDecline: true, protocol.DecisionTimeout: true}

// auditShadows are the values of GET /audit's shadow filter.
var auditShadows = map[string]bool{auditdb.ShadowAny: true, auditdb.ShadowAgree: true, auditdb.ShadowDisagree: true}

// listAudit serves GET /audit: a page of the audit ledger, newest request
// first, filtered by requestId, conversationId, principal, tool, decision,
// what a shadow rule would have done (shadow) and a time range (since,
// until: RFC 3339), limit rows from cursor (the previous
// page's next). With format=jsonl it streams every row the filters select,
// one JSON object a line, for an export.
func (s *Server) listAudit(c *gin.Context) {
	if s.ledger == nil {
		c.JSON(http.StatusNotFound, gin.H{"error": "this API keeps no audit ledger (TOLLGATE_AUDIT_DB is off)"})
		return
	}
	f, jsonl, err := auditFilter(c)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	chain, err := auditChain(c, f, jsonl)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if chain {
		s.exportChain(c)
		return
	}
	if !jsonl {
		ctx, cancel := context.WithTimeout(c.Request.Context(), auditTimeout)
		defer cancel()
		page, err := s.ledger.List(ctx, f)
		if errors.Is(err, auditdb.ErrBadCursor) {
			err = badRequest("%v", err)
		}
		if err != nil {
			writeError(c, s.log, err)
			return
		}
		c.JSON(http.StatusOK, page)
		return
	}
	// The export reads page after page, each under its own timeout, and
	// writes each row as it is read: a ledger of any size streams in
	// bounded memory.
	f.Limit = auditdb.MaxLimit
	enc := json.NewEncoder(c.Writer)
	for started := false; ; started = true {
		ctx, cancel := context.WithTimeout(c.Request.Context(), auditTimeout)
		page, err := s.ledger.List(ctx, f)
		cancel()
		if err != nil {
			if !started {
				// Nothing is sent yet: a plain JSON error, not a download.
				if errors.Is(err, auditdb.ErrBadCursor) {
					err = badRequest("%v", err)
				}
				writeError(c, s.log, err)
				return
			}
			// The status is sent: the export ends short, and a last line
			// says why, so a reader cannot mistake it for the whole.
			s.log.Warn("audit export cut short", "error", err)
			_ = enc.Encode(gin.H{"error": "the export is incomplete: " + err.Error()})
			return
		}
		if !started {
			c.Header("Content-Type", "application/x-ndjson")
			c.Header("Content-Disposition", `attachment; filename="tollgate-audit.jsonl"`)
			c.Status(http.StatusOK)
		}
		for _, r := range page.Records {
			if err := enc.Encode(r); err != nil {
				return // the client left
			}
		}
		c.Writer.Flush()
		if page.Next == "" {
			return
		}
		f.Cursor = page.Next
	}
}

// auditChain reads GET /audit's chain: whether the export carries the
// ledger's chain after its rows. The chain holds every row, so such an
// export is of the whole ledger, unfiltered.
func auditChain(c *gin.Context, f auditdb.Filter, jsonl bool) (bool, error) {
	switch v := c.Query("chain"); v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		if !jsonl {
			return false, badRequest("chain=%s is for the export: add format=jsonl", v)
		}
		if f != (auditdb.Filter{}) {
			return false, badRequest("chain=%s exports the whole ledger, which its chain covers: no filter, limit or cursor", v)
		}
		return true, nil
	default:
		return false, badRequest("chain %q is not 1 or 0", v)
	}
}

// exportChain streams the whole ledger, its rows then its chain's entries,
// as they are at one moment (auditdb.Ledger.Export), one JSON object a
// line: what `tollgate audit verify --file` verifies offline.
func (s *Server) exportChain(c *gin.Context) {
	enc := json.NewEncoder(c.Writer)
	started := false
	start := func() {
		c.Header("Content-Type", "application/x-ndjson")
		c.Header("Content-Disposition", `attachment; filename="tollgate-audit-chain.jsonl"`)
		c.Status(http.StatusOK)
		started = true
	}
	n := 0
	err := s.ledger.Export(c.Request.Context(), auditdb.Filter{}, true, func(line audit.ExportLine) error {
		if !started {
			start()
		}
		if n++; n%auditdb.MaxLimit == 0 {
			c.Writer.Flush()
		}
		return enc.Encode(line)
	})
	switch {
	case err != nil && !started:
		writeError(c, s.log, err)
	case err != nil:
		if c.Request.Context().Err() != nil {
			return // the client left
		}
		// The status is sent: a last line says why the export ends short.
		s.log.Warn("audit export cut short", "error", err)
		_ = enc.Encode(audit.ExportLine{Error: "the export is incomplete: " + err.Error()})
	case !started:
		start() // an empty ledger
	}
}

// verifyAudit serves GET /audit/verify: it checks the ledger's chain and
// rows (auditdb.Ledger.Verify) and answers what it found, ok or the first
// problem, with the head hash to keep elsewhere. expectHead, when set, is
// such a kept hash, which an entry must still have.
func (s *Server) verifyAudit(c *gin.Context) {
	if s.ledger == nil {
		c.JSON(http.StatusNotFound, gin.H{"error": "this API keeps no audit ledger (TOLLGATE_AUDIT_DB is off)"})
		return
	}
	head := c.Query("expectHead")
	if head != "" {
		if _, err := audit.HashEntry(head, nil); err != nil {
			writeError(c, s.log, badRequest("expectHead %q is not a hash of the chain: 64 hex digits", head))
			return
		}
	}
	v, err := s.ledger.Verify(c.Request.Context(), head)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if !v.OK {
		s.log.Warn("the audit ledger's chain does not verify", "seq", v.FirstBad.Seq, "id", v.FirstBad.ID, "problem", v.FirstBad.Problem)
	}
	c.JSON(http.StatusOK, v)
}

// auditFilter reads GET /audit's query.
func auditFilter(c *gin.Context) (auditdb.Filter, bool, error) {
	f := auditdb.Filter{
		RequestID:    c.Query("requestId"),
		Conversation: c.Query("conversationId"),
		Principal:    c.Query("principal"),
		Tool:         c.Query("tool"),
		Decision:     c.Query("decision"),
		Shadow:       c.Query("shadow"),
		Cursor:       c.Query("cursor"),
	}
	if f.Decision != "" && !auditDecisions[f.Decision] {
		return f, false, badRequest("decision %q is not one of approve, decline, timeout", f.Decision)
	}
	if f.Shadow != "" && !auditShadows[f.Shadow] {
		return f, false, badRequest("shadow %q is not one of any, agree, disagree", f.Shadow)
	}
	for name, dst := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if v := c.Query(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, false, badRequest("%s %q is not an RFC 3339 time (example: 2026-12-01T09:00:00Z)", name, v)
			}
			*dst = t
		}
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > auditdb.MaxLimit {
			return f, false, badRequest("limit %q is not a whole number from 1 to %d", v, auditdb.MaxLimit)
		}
		f.Limit = n
	}
	switch format := c.Query("format"); format {
	case "", "json":
		return f, false, nil
	case "jsonl":
		return f, true, nil
	default:
		return f, false, badRequest("format %q is not json or jsonl", format)
	}
}
