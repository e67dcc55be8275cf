package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// TestShadowRulesDisagreementsAreInGETAuditAndOnTheLedgerPage runs the
// demo turn under a policy whose shadow rules would ask about the Bash
// call that runs unasked and about the Write call that asks, then reads
// what they would have done through GET /audit's shadow filter, with the
// ledger on SQLite (the default) and on a real PostgreSQL server, and on
// the ledger page in headless Chromium (which reads GET /audit alike).
func TestShadowRulesDisagreementsAreInGETAuditAndOnTheLedgerPage(t *testing.T) {
	onEachLedger(t, func(t *testing.T, db string, opts []stackOption) {
		st := shadowStack(t, opts...)
		testShadowOverGETAudit(t, st)
		if db == "sqlite" {
			testShadowOnTheLedgerPage(t, st)
		}
	})
}

// shadowStack is a stack whose policy runs Bash unasked and asks about
// Write, and whose shadow rules would ask about both and not about Read.
func shadowStack(t *testing.T, opts ...stackOption) *stack {
	return newStack(t, append(opts, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
			{Tool: protocol.ToolBash, Require: workflows.RequireAlways, Shadow: true},
			{Tool: protocol.ToolRead, Require: workflows.RequireNever, Shadow: true},
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Shadow: true},
		}
	}))...)
}

// testShadowOverGETAudit runs the demo turn on st, approving the Write,
// and checks what GET /audit's shadow filter answers of it.
func testShadowOverGETAudit(t *testing.T, st *stack) {
	_, msgs := st.chat(t, `{"query":"one","conversationId":"shadow"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.Contains(t, asked, protocol.ToolWrite)
	_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+asked[protocol.ToolWrite].RequestID+`","decision":"approve"}`)
	require.Equal(t, true, out["accepted"], out)
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Empty(t, requestsByTool(events), "only the live rules ask: nothing but the Write")

	all := st.audit(t, "conversationId=shadow").Records
	require.Len(t, all, 2, "the Read call, which no rule would ask about, has no row: %+v", all)
	disagree := st.audit(t, "shadow=disagree").Records
	require.Len(t, disagree, 1)
	bash := disagree[0]
	require.Equal(t, protocol.ToolBash, bash.Tool)
	require.Equal(t, audit.ShadowWouldAsk, bash.Shadow)
	require.Equal(t, workflows.DecidedByPolicy, bash.DecidedBy)
	require.Equal(t, audit.OutcomeOK, bash.Outcome, "it ran")
	agree := st.audit(t, "shadow=agree").Records
	require.Len(t, agree, 1)
	require.Equal(t, protocol.ToolWrite, agree[0].Tool)
	require.Equal(t, audit.ShadowWouldAsk, agree[0].Shadow)
	require.Equal(t, workflows.DecidedByPerson, agree[0].DecidedBy)
	require.Len(t, st.audit(t, "shadow=any&tool=Write").Records, 1)

	resp, err := http.Get(st.api.URL + "/audit?shadow=maybe")
	require.NoError(t, err)
	body := readAll(t, resp)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `shadow \"maybe\" is not one of any, agree, disagree`)
}

// testShadowOnTheLedgerPage reads the rows testShadowOverGETAudit left on
// the ledger page: the shadow badges, and the disagreements alone.
func testShadowOnTheLedgerPage(t *testing.T, st *stack) {
	b := newBrowser(t)
	b.do(chromedp.Navigate(st.api.URL + "/ledger"))
	rowSel := func(tool string) string { return fmt.Sprintf(`[data-testid="ledger-row"][data-tool=%q]`, tool) }
	badge := func(tool string) string {
		return `document.querySelector(` + jsQuote(rowSel(tool)+` [data-testid="shadow"]`) + `)`
	}
	b.waitUntil(count(`[data-testid="ledger-row"]`) + ` === 2`)
	require.Equal(t, "true", eval[string](b, badge("Bash")+`.dataset.disagrees`))
	require.Equal(t, "shadow: would ask", eval[string](b, badge("Bash")+`.textContent`))
	require.Equal(t, "false", eval[string](b, badge("Write")+`.dataset.disagrees`))
	require.Contains(t, eval[string](b, `document.querySelector(`+jsQuote(rowSel("Bash"))+`).textContent`), "no rule asked")

	// The disagreements alone, and the filter goes in the address.
	eval[bool](b, `(() => { const el = document.getElementById('filter-shadow'); el.value = 'disagree'; el.dispatchEvent(new Event('change')); return true })()`)
	b.waitUntil(count(`[data-testid="ledger-row"]`) + ` === 1 && ` + count(rowSel("Bash")) + ` === 1`)
	b.waitUntil(`location.search.includes('shadow=disagree')`)
	b.screenshot("ledger-shadow")
}
