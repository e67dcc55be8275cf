package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// GET /approvals answers from the audit ledger when the API has one: the
// rows at stage asked that have not expired, read through indexes built
// for it (auditdb.Ledger.Pending), so the inbox costs what its page
// holds, not a query of every waiting turn. Without a ledger it asks the
// turns (approvalsFromTurns), which is slow past a few hundred.

// maxFilter bounds the tool and the principal GET /approvals filters on:
// a principal has at most 64 characters, a tool name fewer than this.
const maxFilter = 200

// approvalsQuery is what one GET /approvals asks the ledger for.
type approvalsQuery struct {
	conversation, tool, principal string
	limit                         int
	after                         *auditdb.PendingKey
}

// ledgerPage is GET /approvals' answer from the ledger.
type ledgerPage struct {
	Approvals []protocol.PendingApproval `json:"approvals"`
	// Total counts every approval the filters select, on this page or
	// another.
	Total         int    `json:"total"`
	NextPageToken string `json:"nextPageToken,omitempty"`
}

// listApprovals handles GET /approvals: the approvals that wait, soonest
// to expire first, optionally only those of one conversation
// (?conversationId=), one tool (?tool=) or one principal's messages
// (?principal=).
func (s *Server) listApprovals(c *gin.Context) {
	if s.ledger == nil {
		if c.Query("principal") != "" {
			writeError(c, s.log, badRequest("principal needs the audit ledger, which this API does not keep (%s is off): the turns do not say who sent their message", config.EnvAuditDB))
			return
		}
		s.approvalsFromTurns(c)
		return
	}
	q, err := s.readApprovalsQuery(c)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), auditTimeout)
	defer cancel()
	f := auditdb.PendingFilter{
		Conversation: q.conversation, Tool: q.tool, Sender: q.principal,
		Now: time.Now(), After: q.after, Limit: q.limit,
	}
	rows, more, err := s.ledger.Pending(ctx, f)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if len(rows) == 0 && q.after == nil && q.tool == "" && q.principal == "" && s.turnsWaitOutsideLedger(ctx, q.conversation) {
		s.approvalsFromTurns(c)
		return
	}
	total := len(rows)
	if more || q.after != nil {
		if total, err = s.ledger.CountPending(ctx, f); err != nil {
			writeError(c, s.log, err)
			return
		}
	}
	page := ledgerPage{Approvals: make([]protocol.PendingApproval, 0, len(rows)), Total: total}
	for _, r := range rows {
		// A row at stage asked says what the turn's pending query would.
		p := protocol.PendingApproval{
			RequestID: r.ID, WorkflowID: r.WorkflowID, TurnID: r.TurnID, ConversationID: r.ConversationID,
			ToolCallID: r.ToolCallID, ToolName: r.Tool, Arguments: r.Arguments, RequestedAt: r.RequestedAt,
			Preview: r.Preview, Subagent: r.Agent, UserMessage: r.UserMessage, Sandboxed: r.Sandbox == audit.SandboxPreview,
		}
		if r.ExpiresAt != nil {
			p.ExpiresAt = *r.ExpiresAt
		}
		s.standing(&p, r)
		page.Approvals = append(page.Approvals, p)
	}
	if more {
		page.NextPageToken = s.pageToken(q, auditdb.KeyOf(rows[len(rows)-1]))
	}
	body, err := json.Marshal(page)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	// The page's digest is its ETag: an inbox that polls sends it back
	// and, while nothing it lists changed, hears 304 with no body.
	sum := sha256.Sum256(body)
	etag := `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`
	c.Header("ETag", etag)
	c.Header("Cache-Control", "private, no-cache")
	if matchesETag(c.GetHeader("If-None-Match"), etag) {
		c.Status(http.StatusNotModified)
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", body)
}

// standing sets who may decide p now and where its votes stand from its
// ledger row r, which the worker writes again at each vote and escalation
// step (audit.Record.Deciders, Votes): the page costs no query more. A
// row written before the ledger kept them has neither, and p shows
// neither, as before.
func (s *Server) standing(p *protocol.PendingApproval, r audit.Record) {
	if r.Deciders != "" {
		if err := json.Unmarshal([]byte(r.Deciders), &p.Deciders); err != nil {
			s.log.Warn("GET /approvals: a ledger row's deciders are not a JSON array", "requestId", r.ID, "error", err)
		}
	}
	if r.Votes != "" {
		if err := json.Unmarshal([]byte(r.Votes), &p.Votes); err != nil {
			s.log.Warn("GET /approvals: a ledger row's votes are not a JSON object", "requestId", r.ID, "error", err)
			p.Votes = nil
		}
	}
}

// matchesETag reports whether an If-None-Match header names etag.
func matchesETag(header, etag string) bool {
	for v := range strings.SplitSeq(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == etag || v == "*" {
			return true
		}
	}
	return false
}

// readApprovalsQuery reads GET /approvals' filters, limit and pageToken.
func (s *Server) readApprovalsQuery(c *gin.Context) (approvalsQuery, error) {
	q := approvalsQuery{conversation: c.Query("conversationId"), tool: c.Query("tool"), principal: c.Query("principal")}
	if q.conversation != "" {
		if err := checkConversationID(q.conversation); err != nil {
			return q, err
		}
	}
	for name, v := range map[string]string{"tool": q.tool, "principal": q.principal} {
		if len(v) > maxFilter {
			return q, badRequest("%s is %d bytes long: at most %d", name, len(v), maxFilter)
		}
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return q, badRequest("%s %.40q is not text: no tool or principal holds a NUL or bytes that are not UTF-8", name, v)
		}
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > auditdb.MaxLimit {
			return q, badRequest("limit %q is not a whole number from 1 to %d", v, auditdb.MaxLimit)
		}
		q.limit = n
	}
	if v := c.Query("pageToken"); v != "" {
		k, err := s.readPageToken(q, v)
		if err != nil {
			return q, err
		}
		q.after = &k
	}
	return q, nil
}

// A page token is the last row of the page before, (expiresAt, request
// id), with an HMAC-SHA256 of it and of the filters it was made under:
// base64url(expiresAt|id).base64url(mac). The API takes only tokens it
// made, with the same filters; anything else is a 400 before the ledger
// is read. The key is pageKey's.
const pageTokenPurpose = "tollgate GET /approvals page token v1"

// pageToken is the token of the page after k.
func (s *Server) pageToken(q approvalsQuery, k auditdb.PendingKey) string {
	payload := strconv.FormatInt(k.ExpiresAt, 10) + "|" + k.ID
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(s.pageMAC(q, payload))
}

// readPageToken checks token against q's filters and returns its key.
func (s *Server) readPageToken(q approvalsQuery, token string) (auditdb.PendingKey, error) {
	bad := badRequest("pageToken %.40q is not one this API made for these filters: pass the nextPageToken of the page before, with the same conversationId, tool and principal, or leave it out for the first page", token)
	p, m, ok := strings.Cut(token, ".")
	payload, err1 := base64.RawURLEncoding.DecodeString(p)
	mac, err2 := base64.RawURLEncoding.DecodeString(m)
	if !ok || err1 != nil || err2 != nil || !hmac.Equal(mac, s.pageMAC(q, string(payload))) {
		return auditdb.PendingKey{}, bad
	}
	at, id, ok := strings.Cut(string(payload), "|")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" {
		return auditdb.PendingKey{}, bad
	}
	return auditdb.PendingKey{ExpiresAt: n, ID: id}, nil
}

// pageMAC is the HMAC of a token's payload under the filters it pages.
func (s *Server) pageMAC(q approvalsQuery, payload string) []byte {
	m := hmac.New(sha256.New, s.pageKey)
	// No filter holds a NUL (readApprovalsQuery), so the NUL that ends
	// each makes the message unambiguous.
	for _, v := range []string{q.conversation, q.tool, q.principal, payload} {
		m.Write([]byte(v))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// pageKey is the key of GET /approvals' page tokens, derived from the
// secrets every API instance of a deployment is given alike (the link
// secret, the API tokens), so that any instance takes a token another
// made. An API with neither serves loopback only, one process: a key
// made at random at start serves it, and a restart turns its tokens
// down (400; the inbox starts again from the first page).
func pageKey(lk *links.Key, tokens []config.APIToken) []byte {
	m := hmac.New(sha256.New, []byte(pageTokenPurpose))
	keyed := false
	if lk != nil {
		m.Write(lk.Derive(pageTokenPurpose))
		keyed = true
	}
	secrets := make([]string, 0, len(tokens))
	for _, t := range tokens {
		secrets = append(secrets, t.Token)
	}
	slices.Sort(secrets)
	for _, t := range secrets {
		m.Write([]byte(t))
		m.Write([]byte{0})
		keyed = true
	}
	if !keyed {
		random := make([]byte, 32)
		_, _ = rand.Read(random) // crypto/rand.Read never fails
		m.Write(random)
	}
	return m.Sum(nil)
}

// ledgerMissWarnEvery spaces the API's warnings that waiting turns are
// missing from the ledger.
const ledgerMissWarnEvery = time.Minute

// turnsWaitOutsideLedger reports whether visibility knows turns that wait
// for an approval (of conversation conv, when set) while the ledger lists
// none: the worker writes another ledger, or none (TOLLGATE_AUDIT_DB off
// on the worker), and the inbox would be empty. GET /approvals then asks
// the turns, as without a ledger, and the API warns that its ledger and
// the worker's differ. It costs one count of visibility, only when the
// ledger has nothing to list.
func (s *Server) turnsWaitOutsideLedger(ctx context.Context, conv string) bool {
	query := fmt.Sprintf("WorkflowType IN ('%s', '%s') AND ExecutionStatus = 'Running' AND %s IS NOT NULL",
		contract.ChatTurnWorkflow, contract.SubagentWorkflow, contract.PendingApprovalsAttribute)
	if conv != "" {
		// conv matched conversationIDPattern, so it cannot break the quotes.
		query += fmt.Sprintf(" AND %s = '%s'", contract.ConversationIDAttribute, conv)
	}
	resp, err := s.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
	if err != nil {
		var invalid *serviceerror.InvalidArgument
		if !errors.As(err, &invalid) {
			s.log.Debug("count waiting turns", "error", err)
		}
		return false
	}
	if resp.GetCount() == 0 {
		return false
	}
	now := time.Now().UnixNano()
	if last := s.ledgerMissWarned.Load(); now-last >= int64(ledgerMissWarnEvery) && s.ledgerMissWarned.CompareAndSwap(last, now) {
		s.log.Warn("GET /approvals: turns wait for approvals that the audit ledger does not list; answering from the turns, which is slow past a few hundred. "+
			"The worker and the API must name the same ledger ("+config.EnvAuditDB+")",
			"ledger", s.ledger.Where(), "waitingTurns", resp.GetCount())
	}
	return true
}
