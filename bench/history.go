package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// segment is one stretch of a path, from one moment to the next.
type segment struct {
	Key, Name       string
	Floor, Tollgate time.Duration
	HasFloor        bool
}

// Stretches of the two measured paths, in order.
var stretches = []struct{ key, name string }{
	{"created", "start: client starts → the workflow that will publish exists"},
	{"first-wait", "start: its first workflow task waits for the worker"},
	{"first-run", "start: the worker runs its first workflow task (the floor publishes here)"},
	{"model", "start: model activity (scheduled → completed)"},
	{"pub-wait", "start: next workflow task waits for the worker"},
	{"pub-run", "start: the worker runs it, publishing approval_request"},
	{"seen", "start: published → client has it (history long poll, events query, SSE)"},
	{"decision-wait", "approval: decision sent → a workflow task takes it"},
	{"decision-run", "approval: the worker runs that task, scheduling the tool"},
	{"tool", "approval: tool activity (scheduled → completed)"},
	{"result-wait", "approval: next workflow task waits for the worker"},
	{"result-run", "approval: the worker runs it, publishing tool_result"},
	{"result-seen", "approval: published → client has it (history long poll, events query, SSE)"},
}

// breakdown splits the two measured paths of every sample into stretches
// that the workflows' histories (server time, same machine clock) and the
// client's clock mark, and returns the median of each stretch. floorModel
// is the model activity the floor calls before it asks ("" for the raw
// floor, which asks in its first workflow task).
func breakdown(ctx context.Context, c client.Client, floor, tg []turnSample, floorModel string) ([]segment, error) {
	fl, tl := map[string][]time.Duration{}, map[string][]time.Duration{}
	for _, side := range []struct {
		samples     []turnSample
		into        map[string][]time.Duration
		model, tool string
	}{{floor, fl, floorModel, floorActivityName}, {tg, tl, activities.ModelActivity, protocol.ToolWrite}} {
		for _, s := range side.samples {
			h, err := history(ctx, c, s.workflowID)
			if err != nil {
				return nil, err
			}
			marks, err := pathMarks(timedHistory(h), s, side.model, side.tool)
			if err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", s.workflowID, err, timedHistory(h))
			}
			addStretches(side.into, marks)
		}
	}
	return medians(fl, tl), nil
}

// mark is the moment a stretch ends.
type mark struct {
	key string
	at  time.Time
}

// pathMarks finds the moments that end each stretch of one sample's two
// paths: the start path's marks, then the approval path's. The first mark
// of each path is its start and has no key. model names the activity that
// the turn calls before it asks ("" for the raw floor, which asks in its
// first workflow task), tool the activity the approval runs.
func pathMarks(h timedEvents, s turnSample, model, tool string) ([]mark, error) {
	started := h.find(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 0, "")
	first := h.find(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, 0, "")
	marks := []mark{{"", s.start}, {"created", started.at}, {"first-wait", h.byID(first.startedID).at}, {"first-run", first.at}}
	if model != "" {
		msched := h.find(enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 0, model)
		mdone := h.find(enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, msched.id, "")
		publish := h.find(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, mdone.id, "")
		marks = append(marks, mark{"model", mdone.at}, mark{"pub-wait", h.byID(publish.startedID).at}, mark{"pub-run", publish.at})
	}
	marks = append(marks, mark{"seen", s.request})
	marks = append(marks, approvalMarks(h, s.decide, s.result, tool)...)
	return marks, checkMarks(marks)
}

// approvalMarks finds the moments that end each stretch of the approval
// path, decided at decide and seen by the client at seen, which runs the
// activity tool.
func approvalMarks(h timedEvents, decide, seen time.Time, tool string) []mark {
	tsched := h.find(enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 0, tool)
	took := h.byID(tsched.taskCompletedID)
	tdone := h.find(enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, tsched.id, "")
	result := h.find(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, tdone.id, "")
	return []mark{{"", decide}, {"decision-wait", h.byID(took.startedID).at}, {"decision-run", took.at},
		{"tool", tdone.at}, {"result-wait", h.byID(result.startedID).at}, {"result-run", result.at},
		{"result-seen", seen}}
}

func checkMarks(marks []mark) error {
	for _, m := range marks {
		if m.at.IsZero() {
			return fmt.Errorf("history lacks the event that ends %q", m.key)
		}
	}
	return nil
}

// addStretches adds the stretches between marks to into; a mark without a
// key starts a new path.
func addStretches(into map[string][]time.Duration, marks []mark) {
	for i := 1; i < len(marks); i++ {
		if marks[i].key != "" {
			into[marks[i].key] = append(into[marks[i].key], marks[i].at.Sub(marks[i-1].at))
		}
	}
}

// medians turns stretches into segments, in the order of stretches; keys
// without samples are left out.
func medians(floor, tg map[string][]time.Duration) []segment {
	var out []segment
	for _, st := range stretches {
		if len(tg[st.key]) == 0 {
			continue
		}
		seg := segment{Key: st.key, Name: st.name, Tollgate: summarize(tg[st.key]).p50}
		if len(floor[st.key]) > 0 {
			seg.Floor, seg.HasFloor = summarize(floor[st.key]).p50, true
		}
		out = append(out, seg)
	}
	return out
}

// timedEvent is what the breakdown needs of a history event.
type timedEvent struct {
	id  int64
	typ enumspb.EventType
	at  time.Time
	// activity is the type of a scheduled activity.
	activity string
	// scheduledID is the scheduled event a completed activity refers to.
	scheduledID int64
	// startedID is the started event of a completed workflow task.
	startedID int64
	// taskCompletedID is the completed workflow task that scheduled an
	// activity.
	taskCompletedID int64
}

type timedEvents []timedEvent

func timedHistory(h []*historypb.HistoryEvent) timedEvents {
	out := make(timedEvents, len(h))
	for i, ev := range h {
		out[i] = timedEvent{id: ev.GetEventId(), typ: ev.GetEventType(), at: ev.GetEventTime().AsTime()}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			out[i].activity = a.GetActivityType().GetName()
			out[i].taskCompletedID = a.GetWorkflowTaskCompletedEventId()
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
			out[i].scheduledID = a.GetScheduledEventId()
		}
		if a := ev.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			out[i].startedID = a.GetStartedEventId()
		}
	}
	return out
}

// find returns the first event of type typ after event id after (and, for
// scheduled activities, of the named activity; for completions, of the
// activity scheduled as event after), or a zero event.
func (h timedEvents) find(typ enumspb.EventType, after int64, activity string) timedEvent {
	for _, ev := range h {
		if ev.typ != typ || ev.id <= after {
			continue
		}
		if activity != "" && ev.activity != activity {
			continue
		}
		if typ == enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED && ev.scheduledID != after {
			continue
		}
		return ev
	}
	return timedEvent{}
}

// String lists the events, one a line, for an error message.
func (h timedEvents) String() string {
	var b strings.Builder
	for _, ev := range h {
		fmt.Fprintf(&b, "%d %s %s %s sched=%d started=%d wtc=%d\n", ev.id, ev.at.Format("15:04:05.000000"),
			ev.typ, ev.activity, ev.scheduledID, ev.startedID, ev.taskCompletedID)
	}
	return b.String()
}

// byID returns the event with id, or a zero event.
func (h timedEvents) byID(id int64) timedEvent {
	for _, ev := range h {
		if ev.id == id {
			return ev
		}
	}
	return timedEvent{}
}

// timelineRow is one moment of a turn, in ms from the client's request.
type timelineRow struct {
	At    time.Duration
	Where string
	What  string
}

// timeline lists what happened during one turn, in order: the client's
// moments and the events of the conversation's and the turn's histories.
func timeline(ctx context.Context, c client.Client, s turnSample) ([]timelineRow, error) {
	rows := []timelineRow{
		{0, "client", "POST /chat/stream"},
		{s.headers.Sub(s.start), "client", "response headers (the message Update has completed)"},
		{s.request.Sub(s.start), "client", "approval_request event"},
		{s.decide.Sub(s.start), "client", "POST /chat/approval"},
		{s.decided.Sub(s.start), "client", "POST /chat/approval answered (the approval Update has completed)"},
		{s.result.Sub(s.start), "client", "tool_result event"},
		{s.finish.Sub(s.start), "client", "finish event"},
	}
	for _, wf := range []struct{ where, id string }{
		{"conversation", contract.ConversationWorkflowID(s.conv)},
		{"turn", s.workflowID},
	} {
		h, err := history(ctx, c, wf.id)
		if err != nil {
			return nil, err
		}
		for _, ev := range timedHistory(h) {
			at := ev.at.Sub(s.start)
			if ev.at.After(s.finish) {
				break
			}
			what := strings.TrimPrefix(ev.typ.String(), "EVENT_TYPE_")
			if ev.activity != "" {
				what += " " + ev.activity
			}
			rows = append(rows, timelineRow{at, wf.where, what})
		}
	}
	slices.SortStableFunc(rows, func(a, b timelineRow) int { return cmp.Compare(a.At, b.At) })
	return rows, nil
}

// history returns a workflow's whole history.
func history(ctx context.Context, c client.Client, workflowID string) ([]*historypb.HistoryEvent, error) {
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var all []*historypb.HistoryEvent
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", workflowID, err)
		}
		all = append(all, ev)
	}
	return all, nil
}

// whereStuck says what a workflow that did not get on is doing: its last
// history events and its pending activities and workflow task, for the
// error of a benchmark that waited in vain.
func whereStuck(c client.Client, workflowID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "\n  %s at %s:", workflowID, time.Now().Format("15:04:05.000"))
	if h, err := history(ctx, c, workflowID); err != nil {
		fmt.Fprintf(&b, "\n    history: %v", err)
	} else {
		for _, ev := range h[max(0, len(h)-8):] {
			fmt.Fprintf(&b, "\n    %s %s", ev.GetEventTime().AsTime().Format("15:04:05.000"), ev.GetEventType())
		}
	}
	desc, err := c.DescribeWorkflow(ctx, workflowID, "")
	if err != nil {
		fmt.Fprintf(&b, "\n    describe: %v", err)
		return b.String()
	}
	d := desc.RawResponse
	for _, a := range d.GetPendingActivities() {
		fmt.Fprintf(&b, "\n    pending activity %s: %s, attempt %d, last started %s, last heartbeat %s, last failure %v",
			a.GetActivityType().GetName(), a.GetState(), a.GetAttempt(),
			a.GetLastStartedTime().AsTime().Format("15:04:05.000"), a.GetLastHeartbeatTime().AsTime().Format("15:04:05.000"), a.GetLastFailure().GetMessage())
	}
	if wt := d.GetPendingWorkflowTask(); wt != nil {
		fmt.Fprintf(&b, "\n    pending workflow task: %s, attempt %d, scheduled %s", wt.GetState(), wt.GetAttempt(), wt.GetScheduledTime().AsTime().Format("15:04:05.000"))
	}
	return b.String()
}

func historyLength(ctx context.Context, c client.Client, workflowID string) (int, error) {
	h, err := history(ctx, c, workflowID)
	return len(h), err
}
