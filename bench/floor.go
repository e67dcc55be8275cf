package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Names of the raw floor, registered on a worker of its own in the
// benchmark's process.
const (
	floorWorkflowName = "BenchFloor"
	floorActivityName = "BenchFloorTool"
	floorSignalName   = "approval"
)

// How the floor's reader retries a failed events query: as the API's hub
// does (defaultHubSettings in api/hub.go).
const (
	floorQueryTimeout = 10 * time.Second
	floorBackoff      = 50 * time.Millisecond
)

// benchWriteCall is the protected call both sides make.
var benchWriteCall = protocol.ToolCall{ID: "call_w", Name: protocol.ToolWrite, Arguments: `{"file_path":"bench.txt","content":"x"}`}

// floorWorkflow is the least a workflow can do for one approved tool call:
// publish the request in a queryable log, wait for the decision signal, run
// the tool (the same Write activity a turn runs), publish its result. A
// second signal ends it. Its log answers the same events query as a turn's,
// so it is read the same way.
func floorWorkflow(ctx workflow.Context) error {
	var log []protocol.Event
	publish := func(e protocol.Event) {
		e.Seq = len(log) + 1
		log = append(log, e)
	}
	if err := setFloorEventsQuery(ctx, func() []protocol.Event { return log }); err != nil {
		return err
	}
	publish(protocol.Event{Type: protocol.EventApprovalRequest, RequestID: "r", ToolName: protocol.ToolWrite})
	decisions := workflow.GetSignalChannel(ctx, floorSignalName)
	var d protocol.ApprovalDecision
	decisions.Receive(ctx, &d)
	actx := workflow.WithActivityOptions(ctx, floorToolOptions)
	var out activities.ToolOutput
	if err := workflow.ExecuteActivity(actx, floorActivityName, activities.ToolInput{Call: benchWriteCall}).Get(ctx, &out); err != nil {
		return err
	}
	publish(protocol.Event{Type: protocol.EventToolResult, ToolResults: []protocol.ToolResult{{
		ID: benchWriteCall.ID, Name: benchWriteCall.Name, Result: out.Result, Status: out.Status,
	}}})
	decisions.Receive(ctx, nil)
	return nil
}

// floorToolOptions are the options of a tollgate tool call.
var floorToolOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 3 * time.Minute,
	HeartbeatTimeout:    30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
}

// setFloorEventsQuery answers the events query from the log that log
// returns, as a turn answers it.
func setFloorEventsQuery(ctx workflow.Context, log func() []protocol.Event) error {
	return workflow.SetQueryHandler(ctx, contract.EventsQuery, func(req contract.EventsRequest) (contract.EventsResponse, error) {
		l := log()
		resp := contract.EventsResponse{Events: []protocol.Event{}}
		if req.After < len(l) {
			resp.Events = append(resp.Events, l[max(req.After, 0):]...)
		}
		return resp, nil
	})
}

// startFloorWorker runs the floors on queue, with the options the worker
// binary gives its own worker, the very Write tool a turn runs and the
// model activity on the same model server, so that the comparison is of
// everything around them.
func startFloorWorker(c client.Client, queue, workspace, modelURL string) (worker.Worker, error) {
	w := worker.New(c, queue, workflows.WorkerOptions())
	w.RegisterWorkflowWithOptions(floorWorkflow, workflow.RegisterOptions{Name: floorWorkflowName})
	w.RegisterWorkflowWithOptions(shapedConversation, workflow.RegisterOptions{Name: shapedConversationName})
	w.RegisterWorkflowWithOptions(shapedTurn, workflow.RegisterOptions{Name: shapedTurnName})
	tools := &activities.Tools{Workspace: workspace, BashTimeout: 10 * time.Second}
	w.RegisterActivityWithOptions(tools.Write, activity.RegisterOptions{Name: floorActivityName})
	model := activities.NewModel(modelURL+"/v1", "bench", scripted.ModelName, nil)
	w.RegisterActivityWithOptions(model.Chat, activity.RegisterOptions{Name: shapedModelName})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start the floor's worker on %s: %w", queue, err)
	}
	return w, nil
}

// floorReader reads floor workflows the way the API's hub reads a turn
// (temporalSource in api/hub.go): the history's long poll says when, the
// events query reads what is new, and a failed query is read again after a
// pause.
type floorReader struct {
	client client.Client
	// queryErrors counts the events queries that failed (each was read
	// again); lastQueryErr is the last of them.
	queryErrors  atomic.Int64
	lastQueryErr atomic.Value
}

// watch streams a floor workflow's events until ctx ends.
func (r *floorReader) watch(ctx context.Context, workflowID string) <-chan stamped {
	out := make(chan stamped, 16)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		// A child workflow may not exist yet: its history is read again
		// after a pause, as the API's watcher does.
		for ctx.Err() == nil {
			it := r.client.GetWorkflowHistory(ctx, workflowID, "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					break
				}
				switch ev.GetEventType() {
				case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
					poke()
				case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
					poke()
					return
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(floorBackoff):
			}
		}
	}()
	go func() {
		after := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			resp, err := r.events(ctx, workflowID, after)
			if err != nil && ctx.Err() == nil {
				r.queryErrors.Add(1)
				r.lastQueryErr.Store(err.Error())
			}
			if err != nil {
				// Waiting for the next history event instead would wait
				// forever on a floor that waits for its signal.
				select {
				case <-ctx.Done():
					return
				case <-time.After(floorBackoff):
				}
				poke()
				continue
			}
			now := time.Now()
			for _, ev := range resp.Events {
				after = ev.Seq
				select {
				case out <- stamped{Event: ev, at: now}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

func (r *floorReader) events(ctx context.Context, workflowID string, after int) (contract.EventsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, floorQueryTimeout)
	defer cancel()
	v, err := r.client.QueryWorkflow(ctx, workflowID, "", contract.EventsQuery, contract.EventsRequest{After: after})
	if err != nil {
		return contract.EventsResponse{}, fmt.Errorf("query %s of %s after %d: %w", contract.EventsQuery, workflowID, after, err)
	}
	var resp contract.EventsResponse
	if err := v.Get(&resp); err != nil {
		return contract.EventsResponse{}, fmt.Errorf("decode %s of %s: %w", contract.EventsQuery, workflowID, err)
	}
	return resp, nil
}
