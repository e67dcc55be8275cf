package contract

import "github.com/tollgate/tollgate/protocol"

// PolicyTestWorkflow evaluates a candidate policy on the worker, which
// alone compiles CEL: it checks the candidate's examples and, for a
// backtest, replays the audit ledger's rows through it (PolicyTestInput
// in, protocol.PolicyReport out). It runs one activity and keeps no state.
const PolicyTestWorkflow = "PolicyTest"

// PolicyTestWorkflowID is the workflow ID of one policy test, id a fresh
// random id.
func PolicyTestWorkflowID(id string) string {
	return workflowIDPrefix + "policytest-" + id
}

// PolicyTestInput is the input of PolicyTestWorkflow.
type PolicyTestInput struct {
	Request protocol.PolicyTestRequest `json:"request"`
	// Backtest is true for POST /policy/test: the ledger's rows are read;
	// false checks the examples alone (POST /policy/check).
	Backtest bool `json:"backtest,omitempty"`
}

// ErrBadPolicy is the type of the application error a policy test fails
// with when the candidate does not parse or a rule does not compile: its
// message names the rule.
const ErrBadPolicy = "BadPolicy"

// ErrNoLedger is the type of the application error a backtest fails with
// when the worker keeps no audit ledger.
const ErrNoLedger = "NoLedger"
