package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/spantest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/internal/workflowtrace"
)

// parentWorkflow starts its child under the span of the "go" Update's
// handler, as the conversation starts a turn under its message's, and
// returns the span id SpanOf read in its own body.
func parentWorkflow(ctx workflow.Context) (string, error) {
	var handled *workflowtrace.Span
	if err := workflow.SetUpdateHandler(ctx, "go", func(ctx workflow.Context) error {
		s := workflowtrace.SpanOf(ctx)
		handled = &s
		return nil
	}); err != nil {
		return "", err
	}
	own := workflowtrace.SpanOf(ctx).OTel()
	if err := workflow.Await(ctx, func() bool { return handled != nil }); err != nil {
		return "", err
	}
	child := workflow.WithChildOptions(workflowtrace.WithSpan(ctx, *handled), workflow.ChildWorkflowOptions{WorkflowID: "child"})
	if err := workflow.ExecuteChildWorkflow(child, childWorkflow).Get(ctx, nil); err != nil {
		return "", err
	}
	return own.SpanContext().SpanID().String(), nil
}

func childWorkflow(workflow.Context) error { return nil }

func TestWorkflowCodeReadsItsSpanAndChoosesTheParentOfAChildsSpan(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{telemetry.NewTracingInterceptor(tp)}})
	env.RegisterWorkflow(parentWorkflow)
	env.RegisterWorkflow(childWorkflow)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow("go", "u1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("update rejected: %v", err) },
			OnAccept: func() {}, OnComplete: func(any, error) {},
		})
	}, time.Minute)

	env.ExecuteWorkflow(parentWorkflow)
	require.NoError(t, env.GetWorkflowError())
	var own string
	require.NoError(t, env.GetWorkflowResult(&own))

	spans := spantest.FromStubs(exporter.GetSpans())
	run := spans.Named("RunWorkflow:parentWorkflow")
	require.Len(t, run, 1, "spans: %v", spans.Names())
	require.Equal(t, run[0].SpanID, own, "SpanOf in the workflow's body is its run's span")
	start := spans.Named("StartChildWorkflow:childWorkflow")
	require.Len(t, start, 1, "spans: %v", spans.Names())
	// The test environment's Update comes without a client's span, so its
	// handler's span is a root.
	require.Equal(t, []string{"HandleUpdate:go"}, spans.Ancestry(start[0]),
		"the child's start is a child of the span WithSpan chose, not of the run's")
	childRun := spans.Named("RunWorkflow:childWorkflow")
	require.Len(t, childRun, 1)
	require.Equal(t, start[0].SpanID, childRun[0].ParentID)
	require.Empty(t, spans.Named("HandleQuery:__stack_trace"), "queries are not traced")
}

func TestWithoutTheInterceptorThereIsNoSpan(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.ExecuteWorkflow(func(ctx workflow.Context) (bool, error) {
		s := workflowtrace.SpanOf(ctx)
		return s.OTel() == nil && workflowtrace.WithSpan(ctx, s) == ctx, nil
	})
	require.NoError(t, env.GetWorkflowError())
	var none bool
	require.NoError(t, env.GetWorkflowResult(&none))
	require.True(t, none)
}

func TestLiveOnlyLeavesOutTheSpansOfReplaysThatNeverWentLive(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(telemetry.LiveOnly(exporter)))
	tracer := tp.Tracer("test")
	_, live := tracer.Start(context.Background(), "RunWorkflow:live")
	live.End()
	_, replayed := tracer.Start(context.Background(), "RunWorkflow:replayed")
	replayed.SetAttributes(attribute.Bool(telemetry.ReplayedAttribute, true))
	replayed.End()
	_, other := tracer.Start(context.Background(), "RunWorkflow:other")
	other.SetAttributes(attribute.Bool(telemetry.ReplayedAttribute, false))
	other.End()

	require.Equal(t, []string{"RunWorkflow:live", "RunWorkflow:other"}, spantest.FromStubs(exporter.GetSpans()).Names())
}
