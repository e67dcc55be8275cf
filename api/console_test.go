package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// The console and inbox tests drive the pages in real headless Chromium
// (Debian's chromium package) against a real Temporal dev server, worker
// and API.

// browserWait bounds each wait for the page.
const browserWait = 15 * time.Second

// screenshotEnv names a folder where the tests leave screenshots of the
// console and the inbox mid-approval, for a person to look at.
const screenshotEnv = "TOLLGATE_SCREENSHOT_DIR"

// browser is one headless Chromium with one tab.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu sync.Mutex
	// jsErrors are the page's uncaught exceptions and console.error calls.
	jsErrors []string
}

// newBrowser starts headless Chromium (or Chrome) with a fresh profile. A
// machine without one fails the test: the console is part of what
// tollgate ships.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	ctx, stop, err := launchBrowser(t)
	if err != nil && strings.Contains(err.Error(), "chrome failed to start") {
		// Chromium has exited before listening, now and then, on a machine
		// loaded by the other packages' tests, with nothing but its usual
		// warnings in its output. A second launch is a new process with a
		// new profile; what the test then asserts of the page is unchanged.
		t.Logf("chromium exited before listening; launching it again: %v", err)
		stop()
		ctx, stop, err = launchBrowser(t)
	}
	b := &browser{t: t, ctx: ctx}
	t.Cleanup(func() {
		b.mu.Lock()
		errs := b.jsErrors
		b.mu.Unlock()
		for _, e := range errs {
			t.Errorf("the page reported an error: %s", e)
		}
		stop()
	})
	require.NoError(t, err, "start chromium")

	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	console := chromedp.Events(ctx, runtime.ConsoleAPICalled)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			b.jsError(fmt.Sprintf("%s (%s:%d)", text, d.URL, d.LineNumber+1))
		}
	}()
	go func() {
		for ev, err := range console {
			if err != nil {
				return
			}
			if ev.Type != runtime.ConsoleAPICalledTypeError {
				continue
			}
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, cmpOr(a.Description, string(a.Value)))
			}
			b.jsError("console.error: " + strings.Join(parts, " "))
		}
	}()
	return b
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (b *browser) jsError(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.jsErrors = append(b.jsErrors, s)
}

// do runs steps, each wait bounded by browserWait.
func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v\n%s", err, b.pageText())
	}
}

// eval returns the value of a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(b.t, err, "evaluate %s", expr)
	return v
}

// waitUntil waits until a JavaScript expression is truthy in the page.
func (b *browser) waitUntil(expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait+time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`!!(`+expr+`) || undefined`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(browserWait)))
	if err != nil {
		b.t.Fatalf("page: waited %s for %s: %v\n%s", browserWait, expr, err, b.pageText())
	}
}

// pageText is what the page shows, for failure messages.
func (b *browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	if err != nil {
		return "(page text not available: " + err.Error() + ")"
	}
	if len(text) > 4000 {
		text = text[:4000] + "…"
	}
	return "page text:\n" + text
}

// screenshot saves the page as name.png in $TOLLGATE_SCREENSHOT_DIR, when set.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv(screenshotEnv)
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// Selectors of the console's parts.
const (
	consoleTurn = `#turns > [data-testid="turn"]`
	anyEvent    = `[data-seq]`
)

// nthTurn selects the console's n-th turn, from 1.
func nthTurn(n int) string { return fmt.Sprintf(`%s:nth-child(%d)`, consoleTurn, n) }

// callIn selects the card of the tool call of tool in the turn sel.
func callIn(sel, tool string) string { return fmt.Sprintf(`%s .call[data-tool=%q]`, sel, tool) }

// jsQuote makes s a JavaScript string literal.
func jsQuote(s string) string { return strconv.Quote(s) }

// count is the number of elements that match sel.
func count(sel string) string {
	return fmt.Sprintf(`document.querySelectorAll(%s).length`, jsQuote(sel))
}

// pageSeqs returns the sequence numbers of the events the page shows for
// the turn sel, in document order.
func pageSeqs(b *browser, sel string) []int {
	b.t.Helper()
	return eval[[]int](b, fmt.Sprintf(`[...document.querySelectorAll(%s)].map((e) => Number(e.dataset.seq))`,
		jsQuote(sel+" "+anyEvent)))
}

// requireEachEventOnce checks that the page shows events 1..n of a turn,
// each exactly once.
func requireEachEventOnce(t *testing.T, seqs []int, n int) {
	t.Helper()
	sorted := slices.Clone(seqs)
	slices.Sort(sorted)
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	require.Equal(t, want, sorted, "every event of the turn, each once")
}

// serverEvents reads a turn's log from the API from its start, up to the
// first event of type until (or the stream's end when until is "").
func serverEvents(t *testing.T, apiURL, turnID, until string) []protocol.Event {
	t.Helper()
	_, msgs, cancel := openStream(t, apiURL+"/chat/turns/"+turnID+"/events?after=0", nil)
	defer cancel()
	if until == "" {
		return streamToEnd(t, msgs)
	}
	var got []protocol.Event
	for {
		m, ok := nextMessage(t, msgs)
		if !ok {
			t.Fatalf("the stream ended before %s", until)
		}
		if !m.HasID {
			continue
		}
		e := decodeEvent(t, m)
		got = append(got, e)
		if e.Type == until {
			return got
		}
	}
}

// sendFromConsole types a message into the console and sends it.
func sendFromConsole(b *browser, text string) {
	b.t.Helper()
	b.do(
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="query"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="query"]`), text),
		chromedp.Click(chromedp.CSS(`[data-testid="send"]`)),
	)
}

// turnIDOf returns the turn id the page shows for the turn sel.
func turnIDOf(b *browser, sel string) string {
	b.t.Helper()
	b.waitUntil(fmt.Sprintf(`document.querySelector(%s)`, jsQuote(sel)))
	return eval[string](b, fmt.Sprintf(`document.querySelector(%s).dataset.turnId`, jsQuote(sel)))
}

func TestConsoleApprovesAndDeclinesByClickAndShowsTheResults(t *testing.T) {
	env := newStack(t)
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))

	sendFromConsole(b, "tidy up, please")
	turn := nthTurn(1)
	b.do(chromedp.WaitVisible(chromedp.CSS(callIn(turn, "Bash") + ` [data-testid="approve"]`)))
	b.waitUntil(count(turn+` [data-testid="approval-request"]`) + ` === 2`)

	// Each call shows its arguments as indented JSON; the Write what the
	// worker's preview says it does.
	args := eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(callIn(turn, "Write")+` [data-testid="tool-args"]`)))
	require.Contains(t, args, "\n  \"file_path\": \""+scripted.DemoNotePath+"\"")
	preview := eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(callIn(turn, "Write")+` [data-testid="preview"]`)))
	require.Contains(t, preview, "+ A note from tollgate's demo model.+ You asked: tidy up, please")
	require.Equal(t, "Read", eval[string](b, `document.querySelector('.call .tool-name').textContent`))
	// The unprotected Read has not run: its batch waits.
	b.waitUntil(fmt.Sprintf(`document.querySelector(%s)?.textContent === "waiting for the batch"`, jsQuote(callIn(turn, "Read")+` [data-testid="call-status"]`)))
	b.screenshot("console-mid-approval")

	// Approve the Write, decline the Bash with a reason. Each decision
	// folds its call's buttons away, which moves the calls below it: the
	// next click waits for that, as a person's eyes would, or it lands
	// where the button was (seen on a loaded machine).
	b.do(chromedp.Click(chromedp.CSS(callIn(turn, "Write") + ` [data-testid="approve"]`)))
	b.waitUntil(count(callIn(turn, "Write")+` [data-testid="approval-actions"]:not([hidden])`) + ` === 0`)
	b.do(
		chromedp.SendKeys(chromedp.CSS(callIn(turn, "Bash")+` [data-testid="decline-reason"]`), "not on a Friday"),
		chromedp.Click(chromedp.CSS(callIn(turn, "Bash")+` [data-testid="decline"]`)),
	)
	b.do(chromedp.WaitVisible(chromedp.CSS(turn + ` [data-testid="finish"][data-reason="stop"]`)))
	b.waitUntil(count(callIn(turn, "Write")+` [data-testid="tool-result"][data-status="ok"]`) + ` === 1`)
	b.waitUntil(count(callIn(turn, "Bash")+` [data-testid="tool-result"][data-status="declined"]`) + ` === 1`)
	b.waitUntil(count(callIn(turn, "Read")+` [data-testid="tool-result"][data-status="ok"]`) + ` === 1`)
	reason := eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(callIn(turn, "Bash")+` [data-testid="decision-reason"]`)))
	require.Equal(t, "not on a Friday", reason)
	results := eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(turn+` [data-type="tool_result"]`)))
	require.Equal(t, "results: Read ok · Write ok · Bash declined", results)
	answer := eval[string](b, fmt.Sprintf(`[...document.querySelectorAll(%s)].map((e) => e.textContent).join("|")`, jsQuote(turn+` [data-testid="answer"]`)))
	require.Contains(t, answer, `Bash was declined, with the reason "not on a Friday"`)
	require.Equal(t, 0, eval[int](b, count(turn+` [data-testid="approval-actions"]:not([hidden])`)), "no decision is left to make")
	note, err := os.ReadFile(filepath.Join(env.workspace, scripted.DemoNotePath))
	require.NoError(t, err, "the approved Write ran")
	require.Contains(t, string(note), "You asked: tidy up, please")
	turnID := turnIDOf(b, turn)
	requireEachEventOnce(t, pageSeqs(b, turn), len(serverEvents(t, env.api.URL, turnID, "")))
	b.screenshot("console-finished")

	// The next message continues the conversation. Decline the Write
	// without a reason; edit the Bash command, then approve it.
	sendFromConsole(b, "once more")
	turn2 := nthTurn(2)
	require.Equal(t, strings.TrimSuffix(turnID, "1")+"2", turnIDOf(b, turn2), "the same conversation's next turn")
	b.do(
		chromedp.WaitVisible(chromedp.CSS(callIn(turn2, "Bash")+` [data-testid="edit"]`)),
		chromedp.Click(chromedp.CSS(callIn(turn2, "Write")+` [data-testid="decline"]`)),
	)
	b.waitUntil(count(callIn(turn2, "Write")+` [data-testid="approval-actions"]:not([hidden])`) + ` === 0`)
	b.do(
		chromedp.Click(chromedp.CSS(callIn(turn2, "Bash")+` [data-testid="edit"]`)),
		chromedp.WaitVisible(chromedp.CSS(callIn(turn2, "Bash")+` [data-testid="edit-args"]`)),
	)
	prefilled := eval[string](b, fmt.Sprintf(`document.querySelector(%s).value`, jsQuote(callIn(turn2, "Bash")+` [data-testid="edit-args"]`)))
	require.Equal(t, "{\n  \"command\": \"ls -la\"\n}", prefilled)
	b.do(
		chromedp.SetValue(chromedp.CSS(callIn(turn2, "Bash")+` [data-testid="edit-args"]`), `{"command": "echo edited in the console"}`),
		chromedp.Click(chromedp.CSS(callIn(turn2, "Bash")+` [data-testid="approve-edited"]`)),
		chromedp.WaitVisible(chromedp.CSS(turn2+` [data-testid="finish"]`)),
	)
	b.waitUntil(count(callIn(turn2, "Write")+` [data-testid="tool-result"][data-status="declined"]`) + ` === 1`)
	result := eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(callIn(turn2, "Bash")+` [data-testid="tool-result"][data-status="ok"] [data-testid="result-text"]`)))
	require.Contains(t, result, "edited in the console")
}

func TestConsoleShowsEveryEventOnceAfterADroppedConnectionAndAReload(t *testing.T) {
	env := newStack(t)
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	sendFromConsole(b, "survive a reload")
	turn := nthTurn(1)
	b.do(chromedp.WaitVisible(chromedp.CSS(callIn(turn, "Bash") + ` [data-testid="approve"]`)))
	b.waitUntil(count(turn+` [data-type="heartbeat"]`) + ` === 1`)
	turnID := turnIDOf(b, turn)
	waiting := serverEvents(t, env.api.URL, turnID, protocol.EventHeartbeat)
	requireEachEventOnce(t, pageSeqs(b, turn), len(waiting))

	// The API drops the stream: the page resumes after the last event it
	// has, and shows nothing twice.
	env.api.CloseClientConnections()
	b.waitUntil(`Number(document.querySelector('[data-testid="connection"]').dataset.reconnects) >= 1`)
	b.waitUntil(`document.querySelector('[data-testid="connection"]').dataset.state === "live"`)
	requireEachEventOnce(t, pageSeqs(b, turn), len(waiting))
	// What happens after the drop reaches the resumed stream, once.
	write := requestsByTool(waiting)[protocol.ToolWrite].RequestID
	postDecision(t, env.api, write, protocol.DecisionApprove, "", true)
	b.waitUntil(count(turn+` [data-type="approval_decision"]`) + ` === 1`)
	decided := serverEvents(t, env.api.URL, turnID, protocol.EventApprovalDecision)
	requireEachEventOnce(t, pageSeqs(b, turn), len(decided))

	// A reload rebuilds the turn from the API's log: every event once.
	b.do(chromedp.Reload())
	b.do(chromedp.WaitVisible(chromedp.CSS(callIn(turn, "Bash") + ` [data-testid="approve"]`)))
	b.waitUntil(count(turn+` [data-type="approval_decision"]`) + ` === 1`)
	require.Equal(t, 1, eval[int](b, count(consoleTurn)))
	require.Equal(t, "survive a reload", eval[string](b, `document.querySelector('[data-testid="user-message"]').textContent`))
	requireEachEventOnce(t, pageSeqs(b, turn), len(decided))
	require.Equal(t, 1, eval[int](b, count(turn+` [data-testid="approval-actions"]:not([hidden])`)), "only Bash still waits")

	// Deciding still works after the reload.
	b.do(
		chromedp.Click(chromedp.CSS(callIn(turn, "Bash")+` [data-testid="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(turn+` [data-testid="finish"][data-reason="stop"]`)),
	)
	b.waitUntil(count(turn+` [data-testid="tool-result"][data-status="ok"]`) + ` === 3`)
	all := serverEvents(t, env.api.URL, turnID, "")
	require.Equal(t, protocol.EventFinish, all[len(all)-1].Type)
	requireEachEventOnce(t, pageSeqs(b, turn), len(all))

	// And a reload of the finished turn shows it whole, once.
	b.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(turn+` [data-testid="finish"]`)))
	requireEachEventOnce(t, pageSeqs(b, turn), len(all))
}

func TestInboxListsPendingApprovalsAndDecidingThereFinishesTheTurn(t *testing.T) {
	st := newStack(t)
	resp, msgs := st.chat(t, `{"query": "inbox please", "conversationId": "inbox-1"}`)
	turnID := resp.Header.Get(protocol.HeaderTurnID)
	seq := 0
	untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)

	b := newBrowser(t)
	b.do(chromedp.Navigate(st.api.URL + "/inbox"))
	row := func(tool string) string { return fmt.Sprintf(`[data-testid="approval"][data-tool=%q]`, tool) }
	b.do(chromedp.WaitVisible(chromedp.CSS(row("Write"))), chromedp.WaitVisible(chromedp.CSS(row("Bash"))))
	require.Equal(t, "inbox-1", eval[string](b, `document.querySelector('[data-testid="approval"]').dataset.conversationId`))
	require.Equal(t, "/?conversation=inbox-1&turn="+turnID,
		eval[string](b, `document.querySelector('[data-testid="open-in-console"]').getAttribute('href')`))
	require.Equal(t, "inbox please", eval[string](b, `document.querySelector('[data-testid="approval"] [data-testid="user-message"]').textContent`),
		"a card shows the message that led to its call")
	// Age and expiry count live; the timeout is a minute.
	text := func(testid string) string {
		return fmt.Sprintf(`document.querySelector('[data-testid=%q]').textContent`, testid)
	}
	age, expires := eval[string](b, text("age")), eval[string](b, text("expires"))
	require.Regexp(t, `^waiting \d+:\d\d$`, age)
	require.Regexp(t, `^expires in 0:[0-5]\d$`, expires)
	b.waitUntil(text("age") + ` !== ` + jsQuote(age))
	b.waitUntil(text("expires") + ` !== ` + jsQuote(expires))
	b.screenshot("inbox")

	// Filters: by tool, and by conversation.
	setFilter := func(id, value string) {
		b.t.Helper()
		eval[bool](b, fmt.Sprintf(`(() => { const el = document.getElementById(%s); el.value = %s; el.dispatchEvent(new Event('input')); return true })()`,
			jsQuote(id), jsQuote(value)))
	}
	setFilter("filter-tool", "Bash")
	b.waitUntil(count(`[data-testid="approval"]`) + ` === 1 && ` + count(row("Bash")) + ` === 1`)
	setFilter("filter-conversation", "someone-else")
	b.waitUntil(count(`[data-testid="approval"]`) + ` === 0 && !document.querySelector('[data-testid="inbox-empty"]').hidden`)
	setFilter("filter-conversation", "inbox-1")
	b.do(chromedp.WaitVisible(chromedp.CSS(row("Bash"))))

	// Approve the Bash; then decline the Write with a reason. A decided
	// row stays, under "decided", with what became of it.
	b.do(chromedp.Click(chromedp.CSS(row("Bash") + ` [data-testid="approve"]`)))
	b.waitUntil(count(`[data-testid="approval"]`) + ` === 0`)
	decided := `[data-testid="decided-approval"][data-tool="Bash"] [data-testid="outcome"]`
	b.waitUntil(count(decided) + ` === 1`)
	require.Contains(t, eval[string](b, `document.querySelector(`+jsQuote(decided)+`).textContent`), "approved here at")
	setFilter("filter-tool", "")
	b.do(
		chromedp.WaitVisible(chromedp.CSS(row("Write"))),
		chromedp.SendKeys(chromedp.CSS(row("Write")+` [data-testid="decline-reason"]`), "not from the inbox"),
		chromedp.Click(chromedp.CSS(row("Write")+` [data-testid="decline"]`)),
	)
	b.waitUntil(count(`[data-testid="approval"]`) + ` === 0 && !document.querySelector('[data-testid="inbox-empty"]').hidden`)
	b.waitUntil(count(`[data-testid="decided-approval"] [data-testid="outcome"]`) + ` === 2`)
	require.Contains(t, eval[string](b, `document.querySelector('[data-testid="decided-approval"][data-tool="Write"] [data-testid="outcome"]').textContent`), "declined here at")

	// The turn took both decisions and finished.
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	decisions := map[string]protocol.Event{}
	var results []protocol.ToolResult
	for _, e := range rest {
		switch e.Type {
		case protocol.EventApprovalDecision:
			decisions[e.Decision] = e
		case protocol.EventToolResult:
			results = e.ToolResults
		}
	}
	require.Equal(t, "not from the inbox", decisions[protocol.DecisionDecline].Reason)
	require.Contains(t, decisions, protocol.DecisionApprove)
	require.Equal(t, protocol.FinishStop, rest[len(rest)-1].Reason)
	statuses := map[string]string{}
	for _, r := range results {
		statuses[r.Name] = r.Status
	}
	require.Equal(t, map[string]string{"Read": "ok", "Write": "declined", "Bash": "ok"}, statuses)
	require.Equal(t, contract.TurnWorkflowID("inbox-1", 1), turnID)
	require.Empty(t, st.approvals(t, ""))
}

func TestConsoleNestsSubagentEventsUnderTheirTaskCall(t *testing.T) {
	env := newStack(t, withSettings(func(s *workflows.Settings) { s.Agents = []workflows.AgentDef{notetaker} }))
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	sendFromConsole(b, "use a subagent to take notes")

	task := nthTurn(1) + ` .call[data-tool="Task"][data-subagent="notetaker"]`
	sub := task + ` [data-testid="subagent"][data-name="notetaker"]`
	b.do(chromedp.WaitVisible(chromedp.CSS(sub + ` .call[data-tool="Write"] [data-testid="approve"]`)))
	require.Equal(t, 1, eval[int](b, count(sub+` .call[data-tool="Read"]`)), "the subagent's calls are nested under the Task call")
	require.Equal(t, 1, eval[int](b, count(sub+` [data-testid="preview"]`)), "the Write shows the worker's preview")
	require.Zero(t, eval[int](b, count(sub+` [data-testid="diff"]`)), "and no diff of the console's own")
	b.screenshot("console-subagent")

	b.do(
		chromedp.Click(chromedp.CSS(sub+` .call[data-tool="Write"] [data-testid="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(sub+` [data-testid="subagent-finish"]`)),
		chromedp.WaitVisible(chromedp.CSS(nthTurn(1)+` [data-testid="finish"][data-reason="stop"]`)),
	)
	b.waitUntil(count(sub+` .call[data-tool="Write"] [data-testid="tool-result"][data-status="ok"]`) + ` === 1`)
	b.waitUntil(count(task+` > .result-slot [data-testid="tool-result"][data-status="ok"]`) + ` === 1`)
	turnID := turnIDOf(b, nthTurn(1))
	requireEachEventOnce(t, pageSeqs(b, nthTurn(1)), len(serverEvents(t, env.api.URL, turnID, "")))
}

func TestConsoleStrikesThroughTheTextARetriedModelCallVoided(t *testing.T) {
	// The first answer hangs after its first words; the retry, once the
	// heartbeat timeout gives the first attempt up, words it otherwise.
	never := make(chan struct{})
	var asked atomic.Int32
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if asked.Add(1) == 1 {
			return scripted.Reply{Content: "I will count the lines.", Hold: never, HoldAfter: 3}
		}
		return scripted.Reply{Content: "Let me count them instead."}
	}
	env := newStack(t, withScript(script), withSettings(func(s *workflows.Settings) { s.ModelHeartbeatTimeout = 2 * time.Second }))
	t.Cleanup(func() { close(never) })
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	sendFromConsole(b, "count the lines")

	answer := nthTurn(1) + ` [data-testid="answer"]`
	b.do(chromedp.WaitVisible(chromedp.CSS(nthTurn(1) + ` [data-testid="finish"][data-reason="stop"]`)))
	text := func(sel string) string {
		return eval[string](b, fmt.Sprintf(`[...document.querySelectorAll(%s)].map((e) => e.textContent).join("")`, jsQuote(sel)))
	}
	require.Equal(t, "Let me count them instead.", text(answer+` .token:not(.void)`), "the answer kept reads whole")
	void := text(answer + ` .token.void`)
	require.NotEmpty(t, void)
	require.True(t, strings.HasPrefix("I will count the lines.", void), "the void text is the given-up attempt's: %q", void)
	require.Equal(t, "line-through", eval[string](b, `getComputedStyle(document.querySelector(`+jsQuote(answer+` .token.void`)+`)).textDecorationLine`))
	require.Equal(t, "none", eval[string](b, `getComputedStyle(document.querySelector(`+jsQuote(answer+` .token:not(.void)`)+`)).textDecorationLine`))
	turnID := turnIDOf(b, nthTurn(1))
	requireEachEventOnce(t, pageSeqs(b, nthTurn(1)), len(serverEvents(t, env.api.URL, turnID, "")))
}

// notetaker is the example subagent of agents/.
var notetaker = workflows.AgentDef{
	Name:        "notetaker",
	Description: "Reads files in the workspace and writes short notes about them.",
	Tools:       []string{protocol.ToolRead, protocol.ToolWrite},
	Prompt:      "You are a careful note-taker.",
}

func TestWebPagesAreServedWithTheirTypesAndAStrictPolicy(t *testing.T) {
	_, ts := newTestServer(t, newFakeSource(), time.Hour)
	for path, typ := range map[string]string{
		"/":              "text/html",
		"/inbox":         "text/html",
		"/ledger":        "text/html",
		"/web/ledger.js": "text/javascript",
		"/web/common.js": "text/javascript",
		"/web/style.css": "text/css",
	} {
		resp, err := http.Get(ts.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Contains(t, resp.Header.Get("Content-Type"), typ, path)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'", path)
	}
	for _, path := range []string{"/web/nope.js", "/web/index.html", "/web/"} {
		resp, err := http.Get(ts.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
}

func TestConsoleSaysWhenTheContextWasCompacted(t *testing.T) {
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Role == openai.ChatMessageRoleTool {
			return scripted.Reply{Content: "Read it."}
		}
		if countRole(req.Messages, openai.ChatMessageRoleTool) == 0 {
			return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_big", Name: protocol.ToolRead, Arguments: `{"file_path":"big.txt"}`}}}
		}
		return scripted.Reply{Content: "It was long."}
	}
	env := newStack(t, withScript(script), withSettings(func(s *workflows.Settings) { s.ContextBudget = 20 << 10 }))
	require.NoError(t, os.WriteFile(filepath.Join(env.workspace, "big.txt"), []byte(strings.Repeat("a line of the big file\n", 30<<10/23)), 0o644))
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	sendFromConsole(b, "read the big file")
	b.do(chromedp.WaitVisible(chromedp.CSS(nthTurn(1) + ` [data-testid="finish"][data-reason="stop"]`)))
	sendFromConsole(b, "how long was it?")
	note := nthTurn(2) + ` [data-testid="context-compacted"]`
	b.do(chromedp.WaitVisible(chromedp.CSS(note)))
	text := eval[string](b, `document.querySelector(`+jsQuote(note)+`).textContent`)
	require.Contains(t, text, "1 old tool output left out")
	require.Contains(t, text, "the whole conversation is kept")
}

func TestConsoleSaysACallTheTurnStoppedBeforeWasNotRunRatherThanDeclined(t *testing.T) {
	env := newStack(t)
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	sendFromConsole(b, "tidy up")
	first := nthTurn(1)
	b.waitUntil(count(first+` [data-testid="approval-request"]`) + ` === 2`)

	// A new message would stop the waiting batch, so the console asks
	// first; keeping waiting sends nothing.
	sendFromConsole(b, "never mind")
	b.do(chromedp.WaitVisible(chromedp.CSS(`[data-testid="composer-confirm"]`)))
	require.Contains(t, eval[string](b, `document.querySelector('[data-testid="confirm-text"]').textContent`), "2 calls wait for your decision")
	b.do(chromedp.Click(chromedp.CSS(`[data-testid="confirm-cancel"]`)))
	b.waitUntil(`document.querySelector('[data-testid="composer-confirm"]').hidden`)
	require.Equal(t, 1, eval[int](b, count(`#turns > [data-testid="turn"]`)), "nothing was sent")
	require.Equal(t, 2, eval[int](b, count(first+` [data-testid="approval-request"] .decision-panel:not([data-closed])`)), "both still wait")

	// Sending anyway stops the batch: Write and Bash were asked about and
	// are declined; Read was never asked about.
	b.do(chromedp.Click(chromedp.CSS(`[data-testid="send"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(`[data-testid="confirm-send"]`)), chromedp.Click(chromedp.CSS(`[data-testid="confirm-send"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(first + ` [data-testid="finish"][data-reason="cancelled"]`)))
	status := func(tool string) string {
		return eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(callIn(first, tool)+` [data-testid="call-status"]`)))
	}
	require.Equal(t, "not run: the turn stopped", status("Read"))
	require.Equal(t, "declined", status("Write"))
	require.Equal(t, "declined", status("Bash"))
}

// TestInboxSaysWhatBecameOfACallDecidedElsewhere decides a call through the
// API while the inbox shows it: the card moves to the decided ones with the
// ledger's outcome.
func TestInboxSaysWhatBecameOfACallDecidedElsewhere(t *testing.T) {
	st := newStack(t)
	_, msgs := st.chat(t, `{"query": "decide it elsewhere", "conversationId": "inbox-elsewhere"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))

	b := newBrowser(t)
	b.do(chromedp.Navigate(st.api.URL + "/inbox"))
	b.do(chromedp.WaitVisible(chromedp.CSS(`[data-testid="approval"][data-tool="Bash"]`)))
	_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+asked["Bash"].RequestID+`","decision":"decline","reason":"not from here"}`)
	require.Equal(t, true, out["accepted"], out)

	outcome := `[data-testid="decided-approval"][data-tool="Bash"] [data-testid="outcome"]`
	b.waitUntil(`document.querySelector(` + jsQuote(outcome) + `)?.textContent.startsWith('declined')`)
	require.Contains(t, eval[string](b, `document.querySelector(`+jsQuote(outcome)+`).textContent`), "“not from here”")
}

// TestConsoleAsksToRaiseASpentBudgetAndTheTurnGoesOn runs a turn whose
// tool-call budget is spent by its first batch: the console shows the
// budget's request, and approving it lets the turn finish.
func TestConsoleAsksToRaiseASpentBudgetAndTheTurnGoesOn(t *testing.T) {
	env := newStack(t, withSettings(func(s *workflows.Settings) { s.Budgets = contract.Budgets{TurnToolCalls: 2} }))
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	sendFromConsole(b, "tidy up on a budget")
	turn := nthTurn(1)
	b.do(
		chromedp.WaitVisible(chromedp.CSS(callIn(turn, "Write")+` [data-testid="approve"]`)),
		chromedp.Click(chromedp.CSS(callIn(turn, "Write")+` [data-testid="approve"]`)),
	)
	// As a person sees the Write decided before the next click: the turn's
	// cards are drawn again then (its Approve all bar goes).
	b.waitUntil(`document.querySelector(` + jsQuote(callIn(turn, "Write")) + `)?.textContent.includes('approved')`)
	b.do(chromedp.Click(chromedp.CSS(callIn(turn, "Bash") + ` [data-testid="approve"]`)))
	budget := turn + ` [data-testid="approval-request"][data-kind="budget"]`
	b.do(chromedp.WaitVisible(chromedp.CSS(budget)))
	head := eval[string](b, `document.querySelector(`+jsQuote(budget+` .approval-head`)+`).textContent`)
	require.Contains(t, head, "Budget spent: the turn tool calls budget is spent: 3 of 2 tool calls; approve to go on with it raised to 5")
	b.do(chromedp.Click(chromedp.CSS(budget + ` [data-testid="approve"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(turn + ` [data-testid="finish"][data-reason="stop"]`)))
}

// TestConsoleOpensAConversationStartedElsewhereWithItsTurnsMessagesAndWaitingCalls
// starts a conversation over HTTP, as curl does, and opens the console on
// it twice: fresh at /, which lists the calls that wait elsewhere and opens
// their conversation with a click, and at the inbox's link. Each time every
// turn shows the message the API has, and the waiting calls are decided by
// click. The Write overwrites a file: its card shows the worker's preview,
// not a diff of its own.
func TestConsoleOpensAConversationStartedElsewhereWithItsTurnsMessagesAndWaitingCalls(t *testing.T) {
	st := newStack(t)
	require.NoError(t, os.MkdirAll(filepath.Join(st.workspace, filepath.Dir(scripted.DemoNotePath)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(st.workspace, scripted.DemoNotePath), []byte("an older note\n"), 0o644))
	const conv = "started-with-curl"
	waiting := func(query string) string {
		t.Helper()
		resp, msgs := st.chat(t, `{"query": "`+query+`", "conversationId": "`+conv+`"}`)
		seq := 0
		untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)
		return resp.Header.Get(protocol.HeaderTurnID)
	}
	waiting("the first message")
	turn2 := waiting("the second message") // the first turn stops for it

	b := newBrowser(t)
	b.do(chromedp.Navigate(st.api.URL + "/"))
	listed := `[data-testid="elsewhere-conversation"][data-conversation-id="` + conv + `"]`
	b.do(chromedp.WaitVisible(chromedp.CSS(listed)))
	require.Contains(t, eval[string](b, `document.querySelector('[data-testid="elsewhere"]').textContent`), "2 calls wait for a decision in another conversation")
	entry := eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(listed)))
	require.Contains(t, entry, "Write", "the waiting calls, in the order the inbox lists them")
	require.Contains(t, entry, "Bash")
	b.do(chromedp.Click(chromedp.CSS(listed + ` [data-testid="open-conversation"]`)))

	b.waitUntil(count(consoleTurn) + ` === 2`)
	b.waitUntil(`document.querySelector('[data-testid="conversation-id"]').textContent === ` + jsQuote(conv))
	messages := `[...document.querySelectorAll('[data-testid="user-message"]')].map((e) => e.textContent)`
	require.Equal(t, []string{"the first message", "the second message"}, eval[[]string](b, messages))
	require.Equal(t, turn2, turnIDOf(b, nthTurn(2)))
	second := nthTurn(2)
	b.do(chromedp.WaitVisible(chromedp.CSS(callIn(second, "Write") + ` [data-testid="approve"]`)))
	b.waitUntil(count(second+` [data-testid="approval-actions"]`) + ` === 2`)
	b.waitUntil(`document.querySelector('[data-testid="elsewhere"]').hidden`)
	// One truth about the Write: the worker's preview of the overwrite.
	require.Zero(t, eval[int](b, count(callIn(second, "Write")+` [data-testid="diff"]`)), "no diff of the console's own")
	require.Equal(t, 1, eval[int](b, count(callIn(second, "Write")+` [data-testid="preview"]`)))
	require.True(t, strings.HasPrefix(eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(callIn(second, "Write")+` .preview-head`))),
		"overwrite "+scripted.DemoNotePath))

	// One click at a time: a decision redraws the turn's cards, and a
	// click sent while they are redrawn can land on a card being replaced.
	b.do(chromedp.Click(chromedp.CSS(callIn(second, "Bash") + ` [data-testid="approve"]`)))
	b.waitUntil(count(callIn(second, "Bash")+` [data-testid="approval-decision"]`) + ` === 1`)
	b.do(
		chromedp.Click(chromedp.CSS(callIn(second, "Write")+` [data-testid="decline"]`)),
		chromedp.WaitVisible(chromedp.CSS(second+` [data-testid="finish"][data-reason="stop"]`)),
	)
	b.waitUntil(count(callIn(second, "Bash")+` [data-testid="tool-result"][data-status="ok"]`) + ` === 1`)

	// From the inbox's link, in a browser that never saw the conversation.
	turn3 := waiting("a third message")
	inbox := newBrowser(t)
	inbox.do(chromedp.Navigate(st.api.URL + "/?conversation=" + conv + "&turn=" + turn3))
	inbox.waitUntil(count(consoleTurn) + ` === 3`)
	require.Equal(t, []string{"the first message", "the second message", "a third message"}, eval[[]string](inbox, messages))
	inbox.do(chromedp.WaitVisible(chromedp.CSS(callIn(nthTurn(3), "Bash") + ` [data-testid="approve"]`)))
}

func TestConsoleCompactsTheConversationWithInstructions(t *testing.T) {
	env := newStack(t, withScript(summaryScript))
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	require.True(t, eval[bool](b, `document.querySelector('[data-testid="compact"]').disabled`), "no conversation to compact yet")
	sendFromConsole(b, "first")
	b.do(chromedp.WaitVisible(chromedp.CSS(nthTurn(1) + ` [data-testid="finish"][data-reason="stop"]`)))
	sendFromConsole(b, "second")
	b.do(chromedp.WaitVisible(chromedp.CSS(nthTurn(2) + ` [data-testid="finish"][data-reason="stop"]`)))

	b.do(
		chromedp.SendKeys(chromedp.CSS(`[data-testid="compact-instructions"]`), "keep the first"),
		chromedp.Click(chromedp.CSS(`[data-testid="compact"]`)),
	)
	b.waitUntil(`document.querySelector('[data-testid="compact-status"]').dataset.state === 'compacted'`)
	require.Equal(t, "summarized 2 messages, 2 kept whole", eval[string](b, `document.querySelector('[data-testid="compact-status"]').textContent`))
	require.Empty(t, eval[string](b, `document.querySelector('[data-testid="compact-instructions"]').value`))

	sendFromConsole(b, "third")
	note := nthTurn(3) + ` [data-testid="context-compacted"]`
	b.do(chromedp.WaitVisible(chromedp.CSS(note)))
	require.Contains(t, eval[string](b, `document.querySelector(`+jsQuote(note)+`).textContent`), "2 earlier messages summarized, 3 newer kept whole")
	last := env.replies.Requests()[len(env.replies.Requests())-1].Messages
	require.Equal(t, workflows.SummaryPrefix+"The user pasted logs. keep the first", last[1].Content)
}

// TestInboxShowsAPageOfThousandsAndStaysLiveOnUnchangedPolls opens the
// inbox over 250 waiting rows of the ledger and a real waiting turn: it
// shows the first 100, soonest to expire first, says how many wait, shows
// 100 more on a click, polls with the last answer's ETag and hears 304
// while nothing changes, and a decision made elsewhere still moves its
// card to the decided ones.
func TestInboxShowsAPageOfThousandsAndStaysLiveOnUnchangedPolls(t *testing.T) {
	st := newStack(t)
	_, msgs := st.chat(t, `{"query": "among many", "conversationId": "inbox-many"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	now := time.Now()
	var rows []audit.Record
	for i := range 250 {
		expires := now.Add(time.Hour + time.Duration(i)*time.Second)
		wid := fmt.Sprintf("tollgate-conv-many-%d-turn-1", i)
		rows = append(rows, audit.Record{
			ID: wid + "/apr-1", Stage: audit.StageAsked, ConversationID: fmt.Sprintf("many-%d", i), TurnID: wid, WorkflowID: wid,
			ToolCallID: "call_1", Tool: "Edit", Arguments: `{"file_path":"a.txt","old_string":"a","new_string":"b"}`,
			RequestedAt: now, ExpiresAt: &expires, UserMessage: "edit it",
		})
	}
	require.NoError(t, st.ledger.Write(context.Background(), rows))

	b := newBrowser(t)
	b.do(chromedp.Navigate(st.api.URL + "/inbox"))
	cards := count(`#approvals [data-testid="approval"]`)
	b.waitUntil(cards + ` === 100`)
	require.Equal(t, "252 pending · showing 100", eval[string](b, `document.querySelector('[data-testid="inbox-count"]').textContent`))
	require.ElementsMatch(t, []string{"Write", "Bash"}, eval[[]string](b, `[...document.querySelectorAll('#approvals [data-testid="approval"]')].slice(0, 2).map((e) => e.dataset.tool)`),
		"the real turn's calls expire first")

	// Polls of an unchanged inbox are answered 304, and draw nothing.
	changed := eval[int](b, `window.tollgateInboxPolls.changed`)
	b.waitUntil(`window.tollgateInboxPolls.unchanged >= 2`)
	require.Equal(t, changed, eval[int](b, `window.tollgateInboxPolls.changed`))

	b.do(chromedp.Click(chromedp.CSS(`[data-testid="inbox-more"]`)))
	b.waitUntil(cards + ` === 200`)

	_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+asked["Bash"].RequestID+`","decision":"approve"}`)
	require.Equal(t, true, out["accepted"], out)
	b.waitUntil(count(`[data-testid="decided-approval"][data-tool="Bash"]`) + ` === 1`)
	b.waitUntil(`document.querySelector('[data-testid="inbox-count"]').textContent === '251 pending · showing 200'`)
	require.Greater(t, eval[int](b, `window.tollgateInboxPolls.changed`), changed)
}

func TestConsoleDecidesATurnsWaitingCallsAllAtOnce(t *testing.T) {
	env := newStack(t)
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	bar := func(turn string) string { return turn + ` [data-testid="batch-actions"]` }

	// Two calls wait: one click approves both.
	sendFromConsole(b, "tidy up, please")
	turn := nthTurn(1)
	b.waitUntil(count(turn+` [data-testid="approval-request"]`) + ` === 2`)
	b.do(chromedp.WaitVisible(chromedp.CSS(bar(turn) + ` [data-testid="approve-all"]`)))
	require.Equal(t, "Approve all 2", eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(bar(turn)+` [data-testid="approve-all"]`))))
	b.do(chromedp.Click(chromedp.CSS(bar(turn) + ` [data-testid="approve-all"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(turn + ` [data-testid="finish"][data-reason="stop"]`)))
	b.waitUntil(`document.querySelector(` + jsQuote(turn+` [data-type="tool_result"]`) + `)?.textContent === "results: Read ok · Write ok · Bash ok"`)
	require.Equal(t, 0, eval[int](b, count(bar(turn)+`:not([hidden])`)), "no call is left to decide")
	note, err := os.ReadFile(filepath.Join(env.workspace, scripted.DemoNotePath))
	require.NoError(t, err, "the Write approved with the batch ran")
	require.Contains(t, string(note), "You asked: tidy up, please")

	// Decline all, with one reason for both.
	sendFromConsole(b, "once more")
	turn2 := nthTurn(2)
	b.do(
		chromedp.WaitVisible(chromedp.CSS(bar(turn2)+` [data-testid="decline-all"]`)),
		chromedp.SendKeys(chromedp.CSS(bar(turn2)+` [data-testid="decline-all-reason"]`), "not on a Friday"),
		chromedp.Click(chromedp.CSS(bar(turn2)+` [data-testid="decline-all"]`)),
	)
	b.do(chromedp.WaitVisible(chromedp.CSS(turn2 + ` [data-testid="finish"][data-reason="stop"]`)))
	b.waitUntil(`document.querySelector(` + jsQuote(turn2+` [data-type="tool_result"]`) + `)?.textContent === "results: Read ok · Write declined · Bash declined"`)
	reasons := eval[string](b, fmt.Sprintf(`[...document.querySelectorAll(%s)].map((e) => e.textContent).join("|")`, jsQuote(turn2+` [data-testid="decision-reason"]`)))
	require.Equal(t, "not on a Friday|not on a Friday", reasons)

	// Once one call is decided on its own, one is left: no bar.
	sendFromConsole(b, "and again")
	turn3 := nthTurn(3)
	b.do(
		chromedp.WaitVisible(chromedp.CSS(bar(turn3)+` [data-testid="approve-all"]`)),
		chromedp.Click(chromedp.CSS(callIn(turn3, "Write")+` [data-testid="approve"]`)),
	)
	b.waitUntil(count(bar(turn3)+`:not([hidden])`) + ` === 0`)
	b.do(chromedp.Click(chromedp.CSS(callIn(turn3, "Bash") + ` [data-testid="approve"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(turn3 + ` [data-testid="finish"][data-reason="stop"]`)))
}

// TestConsoleFreezesTheGateAndAGrantCoveredCallAsks: a grant answers the
// conversation's Writes; Freeze in the console shows the banner, the next
// Write asks in the console though the grant would answer it, and a thaw
// made elsewhere reaches the console through the open stream.
func TestConsoleFreezesTheGateAndAGrantCoveredCallAsks(t *testing.T) {
	env := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	b := newBrowser(t)
	b.do(chromedp.Navigate(env.api.URL + "/"))
	b.do(chromedp.WaitVisible(chromedp.CSS(`[data-testid="freeze"]`)))
	require.True(t, eval[bool](b, `document.querySelector('[data-testid="gate-banner"]').hidden`), "not frozen")

	// The first Write asks; approved with remember, a grant answers the
	// next ones.
	sendFromConsole(b, "tidy up")
	turn := nthTurn(1)
	b.do(chromedp.WaitVisible(chromedp.CSS(callIn(turn, "Write") + ` [data-testid="approve"]`)))
	requestID := eval[string](b, `document.querySelector(`+jsQuote(callIn(turn, "Write")+` [data-testid="approval-actions"]`)+`).dataset.requestId`)
	resp, body := send(t, http.MethodPost, env.api.URL+"/chat/approval", "", `{"requestId":"`+requestID+`","decision":"approve","remember":"conversation"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	b.do(chromedp.WaitVisible(chromedp.CSS(turn + ` [data-testid="finish"][data-reason="stop"]`)))

	b.do(
		chromedp.SendKeys(chromedp.CSS(`[data-testid="freeze-reason"]`), "incident 42"),
		chromedp.Click(chromedp.CSS(`[data-testid="freeze"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="gate-banner"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="thaw"]`)),
	)
	require.Equal(t, "Frozen by anonymous: incident 42 — every protected call asks", eval[string](b, `document.querySelector('[data-testid="gate-banner"]').textContent`))
	require.Eventually(t, env.admin.Frozen, waitFor, 10*time.Millisecond, "the worker learns of the freeze")

	sendFromConsole(b, "once more")
	turn2 := nthTurn(2)
	b.do(chromedp.WaitVisible(chromedp.CSS(callIn(turn2, "Write") + ` [data-testid="approve"]`)))
	b.screenshot("console-frozen")

	// Thawed elsewhere: the open stream tells the console.
	resp, body = send(t, http.MethodPost, env.api.URL+"/admin/thaw", "", `{"reason":"over"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	b.waitUntil(`document.querySelector('[data-testid="gate-banner"]').hidden && !document.querySelector('[data-testid="freeze"]').hidden`)
	b.do(chromedp.Click(chromedp.CSS(callIn(turn2, "Write") + ` [data-testid="approve"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(turn2 + ` [data-testid="finish"][data-reason="stop"]`)))

	// The ledger's page lists the freeze and the thaw, by their admin.
	b.do(chromedp.Navigate(env.api.URL + "/ledger"))
	for _, kind := range []string{audit.KindFreeze, audit.KindThaw} {
		b.do(chromedp.WaitVisible(chromedp.CSS(`[data-testid="ledger-row"][data-tool="` + audit.AdminTool + `"][data-decision="` + kind + `"]`)))
	}
	require.Equal(t, "anonymous admin", eval[string](b, `document.querySelector('[data-decision="freeze"] [data-testid="by"]').textContent`))
}

// launchBrowser starts headless Chromium with a fresh profile and one tab;
// stop closes both.
func launchBrowser(t *testing.T) (ctx context.Context, stop func(), err error) {
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(proctest.Browser(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 1000),
	)
	ctx, cancel := chromedp.NewContext(actx)
	stop = func() {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_ = chromedp.Cancel(cctx)
		cancel()
		cancelAlloc()
	}
	// The first Run starts the browser; it must not have a timeout, which
	// would stop the browser with it.
	return ctx, stop, chromedp.Do(ctx)
}
