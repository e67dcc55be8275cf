package workflows

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
)

// Register registers the workflows, the model activity and every tool
// activity (named after its tool) with r.
func Register(r worker.Registry, w *Workflows, model *activities.Model, tools *activities.Tools) {
	r.RegisterWorkflowWithOptions(w.ChatTurn, workflow.RegisterOptions{Name: ChatTurnWorkflow})
	r.RegisterWorkflowWithOptions(w.Conversation, workflow.RegisterOptions{Name: ConversationWorkflow})
	r.RegisterWorkflowWithOptions(w.Subagent, workflow.RegisterOptions{Name: SubagentWorkflow})
	r.RegisterActivityWithOptions(model.Chat, activity.RegisterOptions{Name: activities.ModelActivity})
	for name, fn := range tools.Activities() {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	r.RegisterActivityWithOptions(tools.Preview, activity.RegisterOptions{Name: activities.PreviewActivity})
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
// workflow code (a conversation's messages, a turn's result), which is no
// deadlock, and on a loaded machine (or under the race detector) takes
// longer than a second.
func WorkerOptions() worker.Options {
	// A model call's heartbeats carry its answer (patchTokensByHeartbeat):
	// the SDK sends the newest details at most this often, so the API
	// reads the answer as often as the signals used to carry it.
	return worker.Options{DeadlockDetectionTimeout: 5 * time.Second, MaxHeartbeatThrottleInterval: activities.DefaultFlushInterval}
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
	return s.Client.SignalWorkflow(ctx, target.WorkflowID, target.RunID, TokensSignal, batch)
}

// searchAttributes are the custom search attributes tollgate sets.
var searchAttributes = map[string]enumspb.IndexedValueType{
	ConversationIDAttribute:   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	PendingApprovalsAttribute: enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST,
	StatusAttribute:           enumspb.INDEXED_VALUE_TYPE_KEYWORD,
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
