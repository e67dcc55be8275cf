package workflows

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/workflows/contract"
)

// A turn whose history names a stored payload that is no longer in the
// payload store (a folder wiped, a bucket's lifecycle rule) cannot run
// again: the SDK resolves every payload of the history before any workflow
// code runs, and fails the workflow task when one is missing, and Temporal
// retries that task for ever. No code of the turn ever runs to end it, and
// no code of the turn could: a turn that replays its history must issue
// the commands the history holds, so one that noticed the loss part way
// through and ended itself would be a different history, which the SDK
// refuses as non-deterministic (and blocks, as it should for a real bug).
//
// So the worker ends such a turn from outside: LostPayloads watches the
// worker's own calls to Temporal, and when a workflow task (or a query) of
// a ChatTurn or a Subagent fails because a payload is missing
// (payloads.MissingError, which unlike a store that does not answer will
// not pass), it terminates that workflow with a reason that names the
// payload's key (contract.LostPayloadReason). The termination is in the turn's
// history for good: the API reads its reason and ends the turn's stream
// with an error event that says it, and the conversation, which takes a
// terminated turn as one that failed, keeps the user's message and takes
// its next one.
//
// A Conversation is never ended this way: ending it would lose it whole
// (its id can never start another), while a payload restored from a
// backup lets it go on. It waits, and the worker logs why at error level.
type LostPayloads struct {
	log *slog.Logger
	// missingKey finds the key of a missing payload in why a task failed
	// (payloads.MissingKey): given by the worker, so that the workflows
	// link no payload store.
	missingKey func(msg string) (key string, missing bool)

	mu sync.Mutex
	// tasks are the workflow tasks this worker holds now, by task token:
	// a task's answer names only its token.
	tasks map[string]lostTask
	// ending are the runs being terminated, so a task that fails again
	// meanwhile does not terminate twice.
	ending map[string]bool
	client client.Client
}

// lostTask is the workflow a task is of.
type lostTask struct {
	workflowID, runID, workflowType string
}

// maxHeldTasks bounds what LostPayloads remembers: a worker holds a few
// tasks at a time, and a task it never answered (its process ended) is
// forgotten when the map is cleared.
const maxHeldTasks = 10000

// NewLostPayloads returns a LostPayloads that logs to log and finds a
// missing payload's key in a failure's text with missingKey
// (payloads.MissingKey). Add its DialOption to the worker's client
// options, and Attach the client.
func NewLostPayloads(log *slog.Logger, missingKey func(msg string) (key string, missing bool)) *LostPayloads {
	return &LostPayloads{log: log, missingKey: missingKey, tasks: map[string]lostTask{}, ending: map[string]bool{}}
}

// DialOption is the gRPC interceptor that watches the worker's calls.
func (l *LostPayloads) DialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(l.intercept)
}

// Attach gives l the client it terminates with: the worker's own, dialed
// with DialOption.
func (l *LostPayloads) Attach(c client.Client) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.client = c
}

func (l *LostPayloads) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	switch r := req.(type) {
	case *workflowservice.PollWorkflowTaskQueueRequest:
		if err == nil {
			l.hold(reply.(*workflowservice.PollWorkflowTaskQueueResponse))
		}
	case *workflowservice.RespondWorkflowTaskCompletedRequest:
		l.release(r.GetTaskToken())
		if err == nil {
			// A task answered may bring the workflow's next one.
			l.hold(reply.(*workflowservice.RespondWorkflowTaskCompletedResponse).GetWorkflowTask())
		}
	case *workflowservice.RespondWorkflowTaskFailedRequest:
		l.failed(l.release(r.GetTaskToken()), failureText(r.GetFailure()))
	case *workflowservice.RespondQueryTaskCompletedRequest:
		t := l.release(r.GetTaskToken())
		if r.GetCompletedType() == enumspb.QUERY_RESULT_TYPE_FAILED {
			l.failed(t, r.GetErrorMessage()+"\n"+failureText(r.GetFailure()))
		}
	}
	return err
}

// hold remembers the workflow of task t.
func (l *LostPayloads) hold(t *workflowservice.PollWorkflowTaskQueueResponse) {
	if len(t.GetTaskToken()) == 0 {
		return // an empty poll
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tasks) >= maxHeldTasks {
		clear(l.tasks)
	}
	l.tasks[string(t.GetTaskToken())] = lostTask{
		workflowID: t.GetWorkflowExecution().GetWorkflowId(), runID: t.GetWorkflowExecution().GetRunId(),
		workflowType: t.GetWorkflowType().GetName(),
	}
}

// release forgets the task of token and returns its workflow.
func (l *LostPayloads) release(token []byte) lostTask {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tasks[string(token)]
	delete(l.tasks, string(token))
	return t
}

// failed ends the workflow of task t when msg, why its task failed, says
// a payload is missing.
func (l *LostPayloads) failed(t lostTask, msg string) {
	key, missing := l.missingKey(msg)
	if !missing || t.workflowID == "" {
		return
	}
	if t.workflowType != contract.ChatTurnWorkflow && t.workflowType != contract.SubagentWorkflow {
		l.log.Error("a workflow's history names a payload that is not in the payload store; it waits until the payload is restored",
			"workflowId", t.workflowID, "workflowType", t.workflowType, "payload", key)
		return
	}
	l.mu.Lock()
	if l.ending[t.runID] || l.client == nil {
		l.mu.Unlock()
		return
	}
	l.ending[t.runID] = true
	c := l.client
	l.mu.Unlock()
	go func() {
		defer func() {
			l.mu.Lock()
			delete(l.ending, t.runID)
			l.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), terminateTimeout)
		defer cancel()
		if err := c.TerminateWorkflow(ctx, t.workflowID, t.runID, contract.LostPayloadReason(key)); err != nil {
			l.log.Warn("end a turn that lost a payload", "workflowId", t.workflowID, "payload", key, "error", err)
			return
		}
		l.log.Error("ended a turn whose history names a payload that is not in the payload store",
			"workflowId", t.workflowID, "workflowType", t.workflowType, "payload", key)
	}()
}

// terminateTimeout bounds one termination; a failed one is tried again at
// the workflow's next failed task.
const terminateTimeout = 30 * time.Second

// failureText is the text of a failure and its causes.
func failureText(f *failurepb.Failure) string {
	var b strings.Builder
	for ; f != nil; f = f.GetCause() {
		b.WriteString(f.GetMessage())
		b.WriteByte('\n')
	}
	return b.String()
}
