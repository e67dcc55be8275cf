package workflows_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/workflows"
)

// pollLog records the workflow task polls a worker's client makes: what
// each answered, in the order the answers came.
type pollLog struct {
	mu    sync.Mutex
	polls []polled
	// stale, when set, gives the next sticky answer that carries a task
	// the backlog hint the server gave in the benchmark's stall: 1, for a
	// task no poll will get.
	stale atomic.Bool
}

type polled struct {
	sticky, empty bool
	workflowID    string
	sent          time.Time
	took          time.Duration
}

// record sees the server's answers (and gives the stale hint) before the
// SDK does.
func (l *pollLog) record(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	sent := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	poll, ok := req.(*workflowservice.PollWorkflowTaskQueueRequest)
	if !ok || err != nil {
		return err
	}
	r := reply.(*workflowservice.PollWorkflowTaskQueueResponse)
	p := polled{sticky: poll.GetTaskQueue().GetKind() == enumspb.TASK_QUEUE_KIND_STICKY, empty: len(r.GetTaskToken()) == 0,
		workflowID: r.GetWorkflowExecution().GetWorkflowId(), sent: sent, took: time.Since(sent)}
	if p.sticky && !p.empty && l.stale.CompareAndSwap(true, false) {
		r.BacklogCountHint = 1
	}
	l.mu.Lock()
	l.polls = append(l.polls, p)
	l.mu.Unlock()
	return nil
}

// A sticky backlog hint of 1 that no task stands behind moves both of the
// SDK's default workflow pollers to the worker's sticky queue, away from
// the task queue where a new turn's first task waits, until a sticky poll
// comes back empty: on Temporal's default long poll, a minute. The dev
// servers of `make dev` and of the tests answer an empty poll after
// devserver.LongPoll instead. The test gives the worker that hint
// through a real dev server, lets both pollers move to the sticky queue,
// then starts a workflow: the pollers come back to it after one short
// empty poll.
func TestAStaleStickyBacklogHintCostsOneShortPollOnTheDevServer(t *testing.T) {
	srv, _ := onDevServer(t)
	log := &pollLog{}
	opts := srv.ClientOptions()
	opts.ConnectionOptions.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(log.record)}
	c, err := client.Dial(opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)

	const queue = "sticky-hint"
	w := worker.New(c, queue, workflows.WorkerOptions())
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		workflow.GetSignalChannel(ctx, "go").Receive(ctx, nil)
		return nil
	}, workflow.RegisterOptions{Name: "WaitForGo"})
	w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "Done"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func(id, name string) client.WorkflowRun {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, name)
		require.NoError(t, err)
		return run
	}
	// A workflow the worker caches: its next task comes on the sticky queue.
	waiting := start("sticky-hint-waiting", "WaitForGo")
	require.Eventually(t, func() bool {
		d, err := c.DescribeWorkflow(ctx, waiting.GetID(), "")
		return err == nil && d.RawResponse.GetPendingWorkflowTask() == nil && d.RawResponse.GetWorkflowExecutionInfo().GetHistoryLength() >= 4
	}, time.Minute, 20*time.Millisecond, "the waiting workflow's first task completes")

	log.stale.Store(true)
	hinted := time.Now()
	require.NoError(t, c.SignalWorkflow(ctx, waiting.GetID(), "", "go", nil))
	require.NoError(t, waiting.Get(ctx, nil))
	require.False(t, log.stale.Load(), "the signal's task came on the sticky queue, with the stale hint")
	// The poller that held the task queue's poll takes this one; its next
	// poll goes to the sticky queue too.
	require.NoError(t, start("sticky-hint-first", "Done").Get(ctx, nil))
	require.NoError(t, start("sticky-hint-second", "Done").Get(ctx, nil))

	log.mu.Lock()
	defer log.mu.Unlock()
	var stalled []time.Duration
	for _, p := range log.polls {
		if p.workflowID == "sticky-hint-second" {
			break
		}
		if p.sticky && p.empty && p.sent.After(hinted) {
			stalled = append(stalled, p.took)
		}
	}
	require.NotEmpty(t, stalled, "the stale hint kept every poller on the sticky queue until a sticky poll came back empty (the SDK's behaviour this bounds)")
	for _, took := range stalled {
		// Temporal's default keeps such a poll a minute.
		require.Less(t, took, 30*time.Second, "an empty sticky poll waited about the dev server's long poll, %s", devserver.LongPoll)
	}
}
