package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestTheWebUISaysWhatAWaitingTurnWaitsFor reads what the Temporal Web UI
// shows of a turn paused at two approvals: the workflow's current details
// (the calls it waits for, with arguments and expiry) and the summaries of
// its timers and activities.
func TestTheWebUISaysWhatAWaitingTurnWaitsFor(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	_, msgs := st.chat(t, `{"query": "tidy up", "conversationId": "webui"}`)
	seq := 0
	requests := ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest)
	turnID := contract.TurnWorkflowID("webui", 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	v, err := st.client.QueryWorkflow(ctx, turnID, "", workflowMetadataQuery)
	require.NoError(t, err)
	var meta sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&meta))
	details := meta.GetCurrentDetails()
	require.Contains(t, details, "Waiting for approval")
	require.Contains(t, details, "`Bash` `{\"command\":\"ls -la\"}`")
	require.Contains(t, details, requests[0].RequestID)

	summaries := summariesOf(t, st, turnID)
	require.Contains(t, summaries, "model call 1")
	// The batch's one timer names every call it waits for.
	timer := slices.IndexFunc(summaries, func(s string) bool { return strings.HasPrefix(s, "approval: ") })
	require.GreaterOrEqual(t, timer, 0, "a timer named by its calls: %q", summaries)
	require.Contains(t, summaries[timer], `Bash {"command":"ls -la"}`)
	require.Contains(t, summaries[timer], `Write {"file_path":"notes/tollgate.txt"`)

	// A decided call leaves the details at once, not when its batch ends.
	postDecision(t, st.api, requests[0].RequestID, protocol.DecisionApprove, "", true)
	v, err = st.client.QueryWorkflow(ctx, turnID, "", workflowMetadataQuery)
	require.NoError(t, err)
	require.NoError(t, v.Get(&meta))
	require.NotContains(t, meta.GetCurrentDetails(), requests[0].RequestID)
	require.Contains(t, meta.GetCurrentDetails(), requests[1].RequestID)
	postDecision(t, st.api, requests[1].RequestID, protocol.DecisionApprove, "", true)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	summaries = summariesOf(t, st, turnID)
	require.Contains(t, summaries, `Read {"file_path":"README.md"}`, "tool activities are named by their call")
	require.Contains(t, summaries, "model call 2")
	v, err = st.client.QueryWorkflow(ctx, turnID, "", workflowMetadataQuery)
	require.NoError(t, err)
	require.NoError(t, v.Get(&meta))
	require.Empty(t, meta.GetCurrentDetails(), "nothing waits any more")
}

// workflowMetadataQuery is the SDK's built-in query the Web UI reads a
// workflow's current details with.
const workflowMetadataQuery = "__temporal_workflow_metadata"

// summariesOf lists the summaries of the events of a workflow's history:
// what the Web UI names its timers, activities and children by.
func summariesOf(t *testing.T, st *stack, id string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var out []string
	iter := st.client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		if p := e.GetUserMetadata().GetSummary(); p != nil {
			var s string
			require.NoError(t, converter.GetDefaultDataConverter().FromPayload(p, &s))
			out = append(out, s)
		}
	}
	return out
}

// TestTheWebUIShowsTheCallsATurnWaitsFor opens the real Temporal Web UI of
// the dev server in headless Chromium on a turn paused at its approvals,
// and finds its timers named by the calls they wait for on the workflow's
// page (the current details are TestTheWebUISaysWhatAWaitingTurnWaitsFor's);
// the screenshot goes to $TOLLGATE_SCREENSHOT_DIR when set.
func TestTheWebUIShowsTheCallsATurnWaitsFor(t *testing.T) {
	st := newStack(t, withDevServer(devserver.Options{UI: true}))
	_, msgs := st.chat(t, `{"query": "tidy up", "conversationId": "webui-page"}`)
	seq := 0
	untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)
	turnID := contract.TurnWorkflowID("webui-page", 1)

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(proctest.Browser(t)), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1100))
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()
	page := fmt.Sprintf("http://127.0.0.1:%d/namespaces/%s/workflows/%s", st.temporal.UIPort, st.temporal.Namespace, turnID)
	_, err := chromedp.Run(ctx, chromedp.Navigate(page))
	require.NoError(t, err, "open %s", page)
	// The timeline names each timer by the call it waits for.
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](
		`document.body && document.body.innerText.includes('approval: Write {"file_path":"notes/tollgate.txt"') && document.body.innerText.includes('Bash {"command":"ls -la"}') && document.body.innerText.includes("model call 1")`,
		chromedp.WithPollingTimeout(45*time.Second)))
	require.NoError(t, err, "the Web UI's page of %s names the calls its timers wait for", turnID)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // PNG
	require.NoError(t, err)
	if dir := os.Getenv("TOLLGATE_SCREENSHOT_DIR"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "webui-waiting-turn.png"), shot, 0o644))
	}
}

// TestAStatusAttributeTellsWaitingTurnsFromRunningAndIdleOnes lists, as a
// saved view of the Web UI would, the workflows by TollgateStatus: the
// turn waits while its approvals are pending, its conversation runs it,
// and once it has finished the conversation is idle.
func TestAStatusAttributeTellsWaitingTurnsFromRunningAndIdleOnes(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	_, msgs := st.chat(t, `{"query": "tidy up", "conversationId": "status"}`)
	seq := 0
	requests := ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest)
	turn, conv := contract.TurnWorkflowID("status", 1), contract.ConversationWorkflowID("status")
	requireStatus(t, st, contract.StatusWaiting, turn)
	requireStatus(t, st, contract.StatusRunning, conv)

	for _, r := range requests {
		postDecision(t, st.api, r.RequestID, protocol.DecisionApprove, "", true)
	}
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	requireStatus(t, st, contract.StatusIdle, conv)
}

// requireStatus waits until visibility lists exactly ids under status.
func requireStatus(t *testing.T, st *stack, status string, ids ...string) {
	t.Helper()
	query := fmt.Sprintf("%s = '%s' AND ExecutionStatus = 'Running'", contract.StatusAttribute, status)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		resp, err := st.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(c, err)
		var got []string
		for _, e := range resp.GetExecutions() {
			got = append(got, e.GetExecution().GetWorkflowId())
		}
		assert.ElementsMatch(c, ids, got)
	}, waitFor, 50*time.Millisecond, "%s lists %v", query, ids)
}

// TestTheApproverSeesWhatACallWillReallyDo checks the worker's preview on a
// real stack: a Write over an existing file says what it removes (the
// console's own diff of the arguments showed "−0"), a multi-line command is
// shown line by line, in the stream, in GET /approvals and in the console.
func TestTheApproverSeesWhatACallWillReallyDo(t *testing.T) {
	lines := strings.Repeat("an old line\n", 40)
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Done."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{
			{ID: "w", Name: protocol.ToolWrite, Arguments: `{"file_path":"README.md","content":"# replaced\n"}`},
			{ID: "b", Name: protocol.ToolBash, Arguments: `{"command":"ls -la\nrm -rf ~/   # harmless cleanup"}`},
		}}
	}
	st := newStack(t, withScript(script))
	require.NoError(t, os.WriteFile(filepath.Join(st.workspace, "README.md"), []byte(lines), 0o644))
	_, msgs := st.chat(t, `{"query": "clean up", "conversationId": "preview"}`)
	seq := 0
	requests := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	require.True(t, strings.HasPrefix(requests["Write"].Preview, "overwrite README.md (40 lines, 480 bytes) with 1 lines (11 bytes): −40 +1"), requests["Write"].Preview)
	require.Contains(t, requests["Bash"].Preview, "$ ls -la⏎\n$ rm -rf ~/   # harmless cleanup⏎")
	var pending []protocol.PendingApproval
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pending = approvalsAt(c, st.api.URL, "?conversationId=preview")
		require.Len(c, pending, 2)
	}, waitFor, 20*time.Millisecond)
	require.Equal(t, requests[pending[0].ToolName].Preview, pending[0].Preview, "the inbox gets the same preview")

	b := newBrowser(t)
	b.do(chromedp.Navigate(st.api.URL + "/?conversation=preview&turn=" + contract.TurnWorkflowID("preview", 1)))
	b.waitUntil(`document.querySelectorAll('[data-testid="preview"]').length === 2`)
	text := eval[string](b, `[...document.querySelectorAll('[data-testid="preview"]')].map((e) => e.innerText).join("\n")`)
	require.Contains(t, text, "−40 +1")
	require.Contains(t, text, "$ rm -rf ~/   # harmless cleanup⏎")
}
