package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestTheAuditLedgerListsEveryDecisionOverHTTP runs turns whose calls a
// person approves (with an edit) and declines, then reads the ledger
// through GET /audit: filtered, paged and exported, from SQLite (the
// default) and from a real PostgreSQL server.
func TestTheAuditLedgerListsEveryDecisionOverHTTP(t *testing.T) {
	t.Parallel()
	onEachLedger(t, func(t *testing.T, db string, opts []stackOption) {
		st := newStack(t, opts...)
		testAuditOverHTTP(t, st)
	})
}

// onEachLedger runs test as a subtest on SQLite (the default: opts is
// empty) and on a real PostgreSQL server (opts points the stack's audit
// ledger at it), named by db.
func onEachLedger(t *testing.T, test func(t *testing.T, db string, opts []stackOption)) {
	t.Helper()
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			var opts []stackOption
			if db == "postgres" {
				opts = append(opts, withAuditDB(postgresLedger(t)))
			}
			test(t, db, opts)
		})
	}
}

// postgresLedger starts a PostgreSQL server of the test's own and returns
// the URL of an empty database on it, for a stack's audit ledger.
func postgresLedger(t *testing.T) string {
	t.Helper()
	pg := proctest.StartPostgres(t, "tollgate")
	admin, err := sql.Open("pgx", pg.URL("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec("CREATE DATABASE tollgate")
	admin.Close()
	require.NoError(t, err)
	return pg.URL("tollgate")
}

func testAuditOverHTTP(t *testing.T, st *stack) {
	decide := func(e protocol.Event, body string) {
		t.Helper()
		_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+e.RequestID+`",`+body+`}`)
		require.Equal(t, true, out["accepted"], out)
	}
	// Two conversations, each with a Bash call and a Write call to decide.
	for _, conv := range []string{"audit-1", "audit-2"} {
		_, msgs := st.chat(t, `{"query":"one","conversationId":"`+conv+`"}`)
		seq := 0
		asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
		decide(asked["Bash"], `"decision":"approve","arguments":"{\"command\":\"echo edited\"}"`)
		decide(asked["Write"], `"decision":"decline","reason":"not now"`)
		untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	}

	all := st.audit(t, "")
	require.Len(t, all.Records, 4)
	require.Empty(t, all.Next)
	for _, r := range all.Records {
		require.Equal(t, audit.StageEnded, r.Stage, "every row has its outcome once the turn finished")
	}
	bash := st.audit(t, "conversationId=audit-1&tool=Bash").Records
	require.Len(t, bash, 1)
	require.Equal(t, protocol.DecisionApprove, bash[0].Decision)
	require.Equal(t, "person", bash[0].DecidedBy)
	require.Equal(t, `{"command":"echo edited"}`, bash[0].EditedArguments)
	require.Contains(t, bash[0].EditDiff, `+ command: "echo edited"`)
	require.Equal(t, audit.OutcomeOK, bash[0].Outcome)
	require.Contains(t, bash[0].Result, "edited")
	declined := st.audit(t, "decision=decline").Records
	require.Len(t, declined, 2)
	for _, r := range declined {
		require.Equal(t, "Write", r.Tool)
		require.Equal(t, "not now", r.Reason)
		require.Equal(t, audit.OutcomeNotRun, r.Outcome)
	}
	require.Empty(t, st.audit(t, "since="+url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))).Records)
	require.Len(t, st.audit(t, "until="+url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))).Records, 4)

	// Pages of one walk all four rows, newest first.
	var walked []string
	for q := "limit=1"; ; {
		page := st.audit(t, q)
		for _, r := range page.Records {
			walked = append(walked, r.ID)
		}
		if page.Next == "" {
			break
		}
		q = "limit=1&cursor=" + page.Next
	}
	require.Equal(t, []string{all.Records[0].ID, all.Records[1].ID, all.Records[2].ID, all.Records[3].ID}, walked)

	// The export has the same rows, a JSON object a line.
	resp, err := http.Get(st.api.URL + "/audit?format=jsonl")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	var exported []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var r audit.Record
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		exported = append(exported, r.ID)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, walked, exported)

	for query, want := range map[string]string{
		"decision=maybe":   `decision \"maybe\" is not one of approve, decline, timeout`,
		"since=yesterday":  `since \"yesterday\" is not an RFC 3339 time`,
		"limit=0":          `limit \"0\" is not a whole number from 1 to 1000`,
		"cursor=xyz":       `cursor \"xyz\": not a cursor of this ledger`,
		"format=csv":       `format \"csv\" is not json or jsonl`,
		"limit=1&until=no": `until \"no\" is not an RFC 3339 time`,
		// An export that cannot begin is an error, not a download.
		"format=jsonl&cursor=xyz": `cursor \"xyz\": not a cursor of this ledger`,
	} {
		resp, err := http.Get(st.api.URL + "/audit?" + query)
		require.NoError(t, err)
		body := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, query)
		require.Contains(t, resp.Header.Get("Content-Type"), "application/json", query)
		require.Empty(t, resp.Header.Get("Content-Disposition"), query)
		require.Contains(t, body, want, query)
	}
}

// audit reads GET /audit?query.
func (st *stack) audit(t *testing.T, query string) auditdb.Page {
	t.Helper()
	resp, err := http.Get(st.api.URL + "/audit?" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, query)
	var page auditdb.Page
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	return page
}

func TestAnAPIWithoutALedgerSaysSoAtGETAudit(t *testing.T) {
	srv := serveAPI(t, NewServer(Options{}))
	resp, err := http.Get(srv.URL + "/audit")
	require.NoError(t, err)
	body := readAll(t, resp)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.True(t, strings.Contains(body, "TOLLGATE_AUDIT_DB is off"), body)
}

// readAll reads and closes resp's body.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestTheLedgerPageListsFiltersPagesAndExportsTheRows reads the ledger in
// headless Chromium after a turn whose Bash call was approved with an edit
// and whose Write call was declined.
func TestTheLedgerPageListsFiltersPagesAndExportsTheRows(t *testing.T) {
	st := newStack(t)
	_, msgs := st.chat(t, `{"query":"one","conversationId":"ledger-page"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	for id, body := range map[string]string{
		asked["Bash"].RequestID:  `"decision":"approve","arguments":"{\"command\":\"echo from the ledger test\"}"`,
		asked["Write"].RequestID: `"decision":"decline","reason":"not in the ledger test"`,
	} {
		_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+id+`",`+body+`}`)
		require.Equal(t, true, out["accepted"], out)
	}
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	b := newBrowser(t)
	b.do(chromedp.Navigate(st.api.URL + "/ledger?limit=1"))
	rowSel := func(tool string) string { return fmt.Sprintf(`[data-testid="ledger-row"][data-tool=%q]`, tool) }
	// A page of one row, newest first (the Write asked last), then the
	// older one.
	b.waitUntil(count(`[data-testid="ledger-row"]`) + ` === 1 && !document.querySelector('[data-testid="more"]').hidden`)
	b.do(chromedp.Click(chromedp.CSS(`[data-testid="more"]`)))
	b.waitUntil(count(`[data-testid="ledger-row"]`) + ` === 2 && document.querySelector('[data-testid="more"]').hidden`)
	require.Equal(t, "approve", eval[string](b, `document.querySelector(`+jsQuote(rowSel("Bash"))+`).dataset.decision`))
	require.Equal(t, "ok", eval[string](b, `document.querySelector(`+jsQuote(rowSel("Bash"))+`).dataset.outcome`))
	require.Contains(t, eval[string](b, `document.querySelector(`+jsQuote(rowSel("Bash")+` [data-testid="edit-diff"]`)+`).textContent`),
		`+ command: "echo from the ledger test"`)
	require.Contains(t, eval[string](b, `document.querySelector(`+jsQuote(rowSel("Write"))+`).textContent`), "not in the ledger test")
	b.screenshot("ledger")

	// The decision filter reads the ledger again, and goes in the address.
	eval[bool](b, `(() => { const el = document.getElementById('filter-decision'); el.value = 'decline'; el.dispatchEvent(new Event('change')); return true })()`)
	b.waitUntil(count(`[data-testid="ledger-row"]`) + ` === 1 && ` + count(rowSel("Write")) + ` === 1`)
	b.waitUntil(`location.search.includes('decision=decline')`)
	require.Equal(t, "not_run", eval[string](b, `document.querySelector(`+jsQuote(rowSel("Write"))+`).dataset.outcome`))

	// The export holds what the filters select, a row a line: the file the
	// browser saves.
	downloads := t.TempDir()
	b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdpbrowser.SetDownloadBehavior,
			cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads})
		return err
	}))
	b.do(chromedp.Click(chromedp.CSS(`[data-testid="export"]`)))
	saved := filepath.Join(downloads, "tollgate-audit.jsonl")
	var exported []byte
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		exported, err = os.ReadFile(saved)
		require.NoError(c, err)
		require.True(c, strings.HasSuffix(string(exported), "\n"), "the whole file")
	}, browserWait, 50*time.Millisecond, "the browser saves %s", saved)
	lines := strings.Split(strings.TrimSpace(string(exported)), "\n")
	require.Len(t, lines, 1)
	var r audit.Record
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &r))
	require.Equal(t, "Write", r.Tool)
	require.Equal(t, "decline", r.Decision)
}

// TestAnApprovedCallWaitsForNoLedgerWrite runs one approved call with the
// ledger on, as a worker does by default, and reads its turn's history:
// between the decision and the tool, and between the tool and the model
// call that reads its result, the turn wrote nothing (a ledger write is a
// local activity's marker there); nor did it upsert its search attributes
// between the decision and the Write (a visibility write, which the dev
// server's SQLite makes the tool's completion wait for): that comes with
// the tool's result; the row is whole all the same, written by the
// activities that ran anyway; and the turn's history stays within 40
// events. An approved Bash call, which may run for minutes, is shown
// running from its decision on.
func TestAnApprovedCallWaitsForNoLedgerWrite(t *testing.T) {
	t.Parallel()
	replies := map[string][]scripted.Reply{
		"write": {{ToolCalls: []protocol.ToolCall{{ID: "call_w", Name: protocol.ToolWrite, Arguments: `{"file_path":"a.txt","content":"hi"}`}}}, {Content: "Written."}},
		"bash":  {{ToolCalls: []protocol.ToolCall{{ID: "call_b", Name: protocol.ToolBash, Arguments: `{"command":"echo hi"}`}}}, {Content: "Ran."}},
	}
	st := newStack(t, withScript(byQuery(replies)))
	history := func(conversation, query, tool string) []*historypb.HistoryEvent {
		_, msgs := st.chat(t, `{"query":"`+query+`","conversationId":"`+conversation+`"}`)
		seq := 0
		req := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))[tool]
		_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+req.RequestID+`","decision":"approve"}`)
		require.Equal(t, true, out["accepted"], out)
		untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		var events []*historypb.HistoryEvent
		iter := st.client.GetWorkflowHistory(ctx, contract.TurnWorkflowID(conversation, 1), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			e, err := iter.Next()
			require.NoError(t, err)
			events = append(events, e)
		}
		return events
	}
	// between counts the events of type kind after the first event of
	// events that from accepts, up to the first event after it that to
	// accepts.
	between := func(events []*historypb.HistoryEvent, kind enumspb.EventType, from, to func(*historypb.HistoryEvent) bool) int {
		start := slices.IndexFunc(events, from)
		require.GreaterOrEqual(t, start, 0)
		n := 0
		for _, e := range events[start+1:] {
			if to(e) {
				return n
			}
			if e.GetEventType() == kind {
				n++
			}
		}
		t.Fatalf("no event after %d", start)
		return n
	}
	scheduled := func(activity string) func(*historypb.HistoryEvent) bool {
		return func(e *historypb.HistoryEvent) bool {
			return e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == activity
		}
	}
	accepted := func(e *historypb.HistoryEvent) bool {
		return e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
	}
	completed := func(events []*historypb.HistoryEvent, activity string) func(*historypb.HistoryEvent) bool {
		id := events[slices.IndexFunc(events, scheduled(activity))].GetEventId()
		return func(e *historypb.HistoryEvent) bool {
			return e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId() == id
		}
	}
	const (
		marker = enumspb.EVENT_TYPE_MARKER_RECORDED
		upsert = enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
	)

	events := history("ledger-off-path", "write", protocol.ToolWrite)
	t.Logf("one approved call with the ledger on: %d events", len(events))
	require.LessOrEqual(t, len(events), 40, "one approved call with the ledger on")
	written := completed(events, protocol.ToolWrite)
	require.Zero(t, between(events, marker, accepted, scheduled(protocol.ToolWrite)),
		"nothing is written between the decision and the tool")
	require.Zero(t, between(events, marker, written, scheduled(activities.ModelActivity)),
		"nothing is written between the tool and the model call that reads its result")
	require.Zero(t, between(events, upsert, accepted, written),
		"no search attribute is upserted between the decision and the Write's completion")
	require.Equal(t, 1, between(events, upsert, written, scheduled(activities.ModelActivity)),
		"the turn is shown running again with the Write's result")

	bash := history("status-at-decision", "bash", protocol.ToolBash)
	require.Equal(t, 1, between(bash, upsert, accepted, scheduled(protocol.ToolBash)),
		"an approved command is shown running when it starts")
	require.Zero(t, between(bash, upsert, completed(bash, protocol.ToolBash), scheduled(activities.ModelActivity)),
		"and not again with its result")

	rows := st.audit(t, "conversationId=ledger-off-path").Records
	require.Len(t, rows, 1)
	require.Equal(t, audit.StageEnded, rows[0].Stage)
	require.Equal(t, protocol.DecisionApprove, rows[0].Decision)
	require.Equal(t, audit.OutcomeOK, rows[0].Outcome)
	require.NotNil(t, rows[0].DecidedAt)
}

// TestABatchCostsItsTurnAMarkerOfEachKindNotOneACall runs a batch of three
// protected calls, decided one by one, and counts the turn's markers: its
// settings, the batch's vetting, its previews, its request ids, its asked
// rows and the two decisions that left others waiting, whatever the
// number of calls beyond that.
func TestABatchCostsItsTurnAMarkerOfEachKindNotOneACall(t *testing.T) {
	t.Parallel()
	write := func(id, file string) protocol.ToolCall {
		return protocol.ToolCall{ID: id, Name: protocol.ToolWrite, Arguments: `{"file_path":"` + file + `","content":"x"}`}
	}
	replies := map[string][]scripted.Reply{
		"three": {{ToolCalls: []protocol.ToolCall{write("w1", "a.txt"), write("w2", "b.txt"), write("w3", "c.txt")}}, {Content: "Written."}},
	}
	st := newStack(t, withScript(byQuery(replies)))
	_, msgs := st.chat(t, `{"query":"three","conversationId":"batch-markers"}`)
	seq := 0
	for _, e := range untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 3) {
		if e.Type != protocol.EventApprovalRequest {
			continue
		}
		_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+e.RequestID+`","decision":"approve"}`)
		require.Equal(t, true, out["accepted"], out)
	}
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	markers, timers := 0, 0
	iter := st.client.GetWorkflowHistory(ctx, contract.TurnWorkflowID("batch-markers", 1), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			markers++
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			timers++
		}
	}
	require.Equal(t, 7, markers, "settings, vetting, previews, request ids, asked rows, and two decisions that left others waiting")
	require.Equal(t, 1, timers, "one timer for the batch")
	rows := st.audit(t, "conversationId=batch-markers").Records
	require.Len(t, rows, 3)
	for _, r := range rows {
		require.Equal(t, audit.StageEnded, r.Stage)
		require.Equal(t, audit.OutcomeOK, r.Outcome)
	}
}
