package workflows

import (
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
)

// The policy's rules; package policy defines them, and reads and checks
// them.
type Rule = policy.Rule

// What a policy rule requires of a tool's calls.
const (
	RequireAlways = policy.RequireAlways
	RequireNever  = policy.RequireNever
	RequireWhen   = policy.RequireWhen
)

// DeciderRolePrefix starts a Deciders entry that names a role.
const DeciderRolePrefix = policy.DeciderRolePrefix

// rule is the policy's live rule for tool, or nil. An MCP tool without a
// rule of its own follows its server's rule (one for mcp__<server>), if
// any. A shadow rule is never a tool's rule: it only watches
// (shadowRule).
func (s Settings) rule(tool string) *Rule { return s.findRule(tool, false) }

// shadowRule is the policy's shadow rule for tool, or nil, found as rule
// finds a live one.
func (s Settings) shadowRule(tool string) *Rule { return s.findRule(tool, true) }

// findRule is the rule for tool that is a shadow rule or not.
func (s Settings) findRule(tool string, shadow bool) *Rule {
	find := func(name string) *Rule {
		var rule *Rule
		for i := range s.Rules {
			if s.Rules[i].Tool == name && s.Rules[i].Shadow == shadow {
				rule = &s.Rules[i]
			}
		}
		return rule
	}
	if rule := find(tool); rule != nil {
		return rule
	}
	if server := s.mcpServerName(tool); server != "" {
		return find(server)
	}
	return nil
}

// check is what policy says of one call. Its fields are exported for the
// history: a turn records the checks of each batch (see turn.vetBatch).
type check struct {
	Required bool          `json:"required"`
	Timeout  time.Duration `json:"timeout"`
	// Problem says why a rule could not decide, so approval is required.
	Problem string `json:"problem,omitempty"`
	// Always is true when a rule requires approval of the tool always:
	// then even a bypassed turn asks.
	Always bool `json:"always,omitempty"`
}

// check applies the policy to call, its rule's evaluation taken from
// budget (nil: bounded by policy.CostLimit alone). A rule that fails at run
// time (a missing argument, say, or one so large that the rule passes its
// cost limit) requires approval: policy errors fail closed.
func (s Settings) check(call protocol.ToolCall, budget *policy.Budget) check {
	c := check{Timeout: s.ApprovalTimeout}
	rule := s.rule(call.Name)
	if rule == nil {
		c.Required = s.requires(call.Name)
		return c
	}
	if rule.Timeout > 0 {
		c.Timeout = rule.Timeout
	}
	required, err := s.evaluate(rule, call, budget)
	c.Required = required || err != nil
	if err != nil {
		c.Problem = fmt.Sprintf("policy rule for %s could not decide (%v), so approval is required", call.Name, err)
	}
	c.Always = rule.Require != RequireNever && rule.Require != RequireWhen
	return c
}

// evaluate is whether rule requires approval of call, or why it could not
// decide.
func (s Settings) evaluate(rule *Rule, call protocol.ToolCall, budget *policy.Budget) (bool, error) {
	switch rule.Require {
	case RequireNever:
		return false, nil
	case RequireWhen:
		spec, _ := s.spec(call.Name)
		return policy.EvalWhen(rule.When, call.Arguments, spec.Hints(), budget)
	default:
		return true, nil
	}
}

// shadowCheck is what a tool's shadow rule says of one call: whether it
// would ask, and why it could not decide when it could not (then it would
// ask). A turn records it beside the call's check (vetting.Shadow); it
// changes nothing the call does, and only the ledger shows it.
type shadowCheck struct {
	Required bool   `json:"required"`
	Problem  string `json:"problem,omitempty"`
}

// shadow is what the shadow rule of call's tool says of it, or nil when
// the tool has none. Its evaluation takes from its own budget, so that a
// costly shadow rule never leaves a live rule too little (the live rule
// would fail closed: the shadow rule would act).
func (s Settings) shadow(call protocol.ToolCall, budget *policy.Budget) *shadowCheck {
	rule := s.shadowRule(call.Name)
	if rule == nil {
		return nil
	}
	required, err := s.evaluate(rule, call, budget)
	if err != nil {
		return &shadowCheck{Required: true, Problem: fmt.Sprintf("shadow rule for %s could not decide (%v)", call.Name, err)}
	}
	return &shadowCheck{Required: required}
}

// RequiresApproval reports whether settings' policy requires approval of a
// call of tool with the given arguments, as the gate decides it: on the
// arguments normalized for the tool when settings.Tools describes it, the
// workspace's links followed (a call whose arguments are refused never
// asks: it never runs). For code
// outside a workflow that checks a policy (docs/policy.md's example policies are
// tested with it).
func RequiresApproval(settings Settings, tool, arguments string) bool {
	c, err := settings.vet(tool, arguments)
	return err == nil && c.Required
}
