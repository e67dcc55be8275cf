package workflows

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Register registers the workflows, the model activity and every tool
// activity (named after its tool) with r.
func Register(r worker.Registry, w *Workflows, model *activities.Model, tools *activities.Tools) {
	r.RegisterWorkflowWithOptions(w.ChatTurn, workflow.RegisterOptions{Name: contract.ChatTurnWorkflow})
	r.RegisterWorkflowWithOptions(w.Conversation, workflow.RegisterOptions{Name: contract.ConversationWorkflow})
	r.RegisterWorkflowWithOptions(w.Subagent, workflow.RegisterOptions{Name: contract.SubagentWorkflow})
	r.RegisterWorkflowWithOptions(w.Control, workflow.RegisterOptions{Name: contract.ControlWorkflow})
	r.RegisterActivityWithOptions(model.Chat, activity.RegisterOptions{Name: activities.ModelActivity})
	for name, fn := range tools.Activities() {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	r.RegisterActivityWithOptions(tools.Preview, activity.RegisterOptions{Name: activities.PreviewActivity})
	r.RegisterActivityWithOptions(tools.Previews, activity.RegisterOptions{Name: activities.PreviewsActivity})
}

// RegisterMCP registers an activity for each tool of the MCP servers, named
// after its tool (mcp__<server>__<tool>); m may be nil.
func RegisterMCP(r worker.Registry, m *activities.MCP) {
	for name, fn := range m.Activities() {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// WorkerOptions are the options of a worker that runs these workflows.
// The deadlock detector allows a workflow task 5 s instead of the SDK's 1 s:
// a turn or a conversation encodes and decodes payloads of megabytes in
// workflow code (a conversation's messages, a turn's result, the arguments
// of a batch of 150 calls of 28 KiB it normalizes), which is no deadlock,
// and on a loaded machine takes longer than a second.
//
// A build with the race detector allows ten times as long
// (deadlockTimeout): such code runs 2 to 20 times slower under it, a
// task of that batch took more than 5 s on one loaded core, and once the detector
// fires the SDK leaves the task's coroutine running beside the next
// attempt, a data race of the SDK's own (temporalio/sdk-go#1240) that
// fails every test running at the time.
func WorkerOptions() worker.Options {
	// A model call's heartbeats carry its answer (patchTokensByHeartbeat):
	// the SDK sends the newest details at most this often, so the API
	// reads the answer as often as the signals used to carry it.
	return worker.Options{DeadlockDetectionTimeout: deadlockTimeout, MaxHeartbeatThrottleInterval: protocol.DefaultFlushInterval}
}

// RegisterNotifier registers the notice activity, for a worker whose
// Settings.Notify is true.
func RegisterNotifier(r worker.Registry, n *activities.Notifier) {
	r.RegisterActivityWithOptions(n.Notify, activity.RegisterOptions{Name: activities.NotifyActivity})
}

// RegisterAuditor registers the audit ledger's local activity, for a
// worker whose Settings.Audit is true.
func RegisterAuditor(r worker.Registry, a *activities.Auditor) {
	r.RegisterActivityWithOptions(a.Audit, activity.RegisterOptions{Name: activities.AuditActivity})
}

// TokenSignaler delivers the model activity's streamed text to its turn as
// the tokens signal.
type TokenSignaler struct {
	Client client.Client
}

// SendTokens signals one batch of answer text to the turn named by target.
func (s TokenSignaler) SendTokens(ctx context.Context, target activities.TokenTarget, batch activities.TokenBatch) error {
	return s.Client.SignalWorkflow(ctx, target.WorkflowID, target.RunID, contract.TokensSignal, batch)
}

// searchAttributes are the custom search attributes tollgate sets.
var searchAttributes = map[string]enumspb.IndexedValueType{
	contract.ConversationIDAttribute:   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	contract.PendingApprovalsAttribute: enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST,
	contract.StatusAttribute:           enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

// EnsureSearchAttributes registers the custom search attributes that are
// missing in namespace and logs those it added.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string, log *slog.Logger) error {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes of namespace %s: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range searchAttributes {
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("add search attributes to namespace %s: %w", namespace, err)
	}
	for name, typ := range missing {
		log.Info("registered search attribute", "name", name, "type", typ.String(), "namespace", namespace)
	}
	return nil
}

// Probing the search attributes (AwaitSearchAttributes).
const (
	// probeAttemptTimeout bounds one probe workflow: its task fails and is
	// tried again while a service does not know the attributes yet.
	probeAttemptTimeout = 5 * time.Second
	// probeInterval is the pause between two probes.
	probeInterval = 500 * time.Millisecond
	// probeValue is what the probe sets and searches for.
	probeValue = "tollgate-probe"
)

// AwaitSearchAttributes returns once a workflow in namespace can set every
// search attribute tollgate sets, and visibility can search on them, or an
// error naming why not when ctx ends first. On SQL visibility a custom
// search attribute is a mapping in the namespace's record, which each
// service reads through a cache of its own: right after AddSearchAttributes
// the history service may not know it yet, and a workflow task that sets
// it fails (BadSearchAttributes). Listing the attributes asks only the
// frontend, so the probe is a real workflow, run by a worker of its own on
// a task queue of its own, that sets them all; the worker takes no work
// before it has finished.
func AwaitSearchAttributes(ctx context.Context, c client.Client, namespace string, log *slog.Logger) error {
	queue := probeValue + "-" + uuid.NewString()
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(probeSearchAttributes, workflow.RegisterOptions{Name: contract.SearchAttributesProbeWorkflow})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start the search attribute probe's worker: %w", err)
	}
	defer w.Stop()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := probeOnce(ctx, c, queue, attempt)
		if err == nil {
			log.Info("search attributes are usable", "namespace", namespace, "probes", attempt, "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		log.Info("search attributes are not usable yet", "namespace", namespace, "probe", attempt, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attributes %s of namespace %s not usable after %s (%d probes): %w",
				strings.Join(slices.Sorted(maps.Keys(searchAttributes)), ", "), namespace, time.Since(start).Round(time.Second), attempt, err)
		case <-time.After(probeInterval):
		}
	}
}

// probeOnce runs one probe workflow and one visibility query on every
// attribute.
func probeOnce(ctx context.Context, c client.Client, queue string, attempt int) error {
	actx, cancel := context.WithTimeout(ctx, probeAttemptTimeout)
	defer cancel()
	run, err := c.ExecuteWorkflow(actx, client.StartWorkflowOptions{
		ID: fmt.Sprintf("%s-%d", queue, attempt), TaskQueue: queue,
		// The server ends a probe that no task of it completes.
		WorkflowExecutionTimeout: probeAttemptTimeout,
	}, contract.SearchAttributesProbeWorkflow)
	if err != nil {
		return fmt.Errorf("start probe: %w", err)
	}
	if err := run.Get(actx, nil); err != nil {
		if why := lastTaskFailure(ctx, c, run); why != "" {
			return fmt.Errorf("probe %s: its workflow task failed: %s", run.GetID(), why)
		}
		return fmt.Errorf("probe %s: %w", run.GetID(), err)
	}
	var clauses []string
	for _, name := range slices.Sorted(maps.Keys(searchAttributes)) {
		clauses = append(clauses, fmt.Sprintf("%s = '%s'", name, probeValue))
	}
	query := strings.Join(clauses, " AND ")
	if _, err := c.ListWorkflow(actx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 1}); err != nil {
		return fmt.Errorf("list workflows where %s: %w", query, err)
	}
	return nil
}

// lastTaskFailure is the message of the last failed workflow task of run,
// or "" when none failed (or its history cannot be read).
func lastTaskFailure(ctx context.Context, c client.Client, run client.WorkflowRun) string {
	// Read also when ctx has ended: the reason is what the caller needs.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeAttemptTimeout)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	why := ""
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return why
		}
		if f := ev.GetWorkflowTaskFailedEventAttributes(); f != nil {
			why = cmp.Or(f.GetFailure().GetMessage(), f.GetCause().String())
		}
	}
	return why
}

// probeSearchAttributes is the contract.SearchAttributesProbeWorkflow: it
// sets every attribute in searchAttributes to probeValue.
func probeSearchAttributes(ctx workflow.Context) error {
	var set []temporal.SearchAttributeUpdate
	for _, name := range slices.Sorted(maps.Keys(searchAttributes)) {
		switch searchAttributes[name] {
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST:
			set = append(set, temporal.NewSearchAttributeKeyKeywordList(name).ValueSet([]string{probeValue}))
		default:
			set = append(set, temporal.NewSearchAttributeKeyKeyword(name).ValueSet(probeValue))
		}
	}
	return workflow.UpsertTypedSearchAttributes(ctx, set...)
}
