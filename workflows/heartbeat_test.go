package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

func TestHeartbeatTimeoutsComeFromSettingsOrTheirDefaults(t *testing.T) {
	for _, tc := range []struct {
		name                string
		model, tool         time.Duration
		wantModel, wantTool time.Duration
	}{
		{"defaults", 0, 0, DefaultModelHeartbeatTimeout, DefaultToolHeartbeatTimeout},
		{"settings", 3 * time.Second, 2 * time.Second, 3 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSettings()
			s.ModelHeartbeatTimeout, s.ToolHeartbeatTimeout = tc.model, tc.tool
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			w := &Workflows{Settings: s}
			env.RegisterWorkflowWithOptions(w.ChatTurn, workflow.RegisterOptions{Name: contract.ChatTurnWorkflow})
			var modelTimeouts, toolTimeouts []time.Duration
			env.RegisterActivityWithOptions(func(ctx context.Context, _ activities.ModelInput) (activities.ModelOutput, error) {
				modelTimeouts = append(modelTimeouts, activity.GetInfo(ctx).HeartbeatTimeout)
				if len(modelTimeouts) == 1 {
					return calls(call("call_read", protocol.ToolRead, `{"file_path":"a"}`)), nil
				}
				return activities.ModelOutput{Content: "done"}, nil
			}, activity.RegisterOptions{Name: activities.ModelActivity})
			env.RegisterActivityWithOptions(func(ctx context.Context, _ activities.ToolInput) (activities.ToolOutput, error) {
				toolTimeouts = append(toolTimeouts, activity.GetInfo(ctx).HeartbeatTimeout)
				return activities.ToolOutput{Result: "ok", Status: protocol.StatusOK}, nil
			}, activity.RegisterOptions{Name: protocol.ToolRead})

			env.ExecuteWorkflow(contract.ChatTurnWorkflow, userTurn("hi"))
			require.NoError(t, env.GetWorkflowError())
			require.Equal(t, []time.Duration{tc.wantModel, tc.wantModel}, modelTimeouts)
			require.Equal(t, []time.Duration{tc.wantTool}, toolTimeouts)
		})
	}
}
