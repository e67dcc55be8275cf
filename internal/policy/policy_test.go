package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPolicyFileRulesAreReadInToolOrder(t *testing.T) {
	rules, err := Parse([]byte(`
tools:
  Write:
    require: always
    timeout: 10m
  Bash:
    when: args.command.startsWith("rm ") || args.command.contains("sudo")
  Read:
    require: never
`))
	require.NoError(t, err)
	require.Equal(t, []Rule{
		{Tool: "Bash", Require: RequireWhen, When: `args.command.startsWith("rm ") || args.command.contains("sudo")`},
		{Tool: "Read", Require: RequireNever},
		{Tool: "Write", Require: RequireAlways, Timeout: 10 * time.Minute},
	}, rules)
}

func TestRuleThatDoesNotCompileIsAnErrorNamingToolAndExpression(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte("tools:\n  Bash:\n    when: args.command.startsWith(\n  Edit:\n    require: often\n  Write:\n    require: always\n    timeout: soon\n"), 0o644))

	_, err := Load(path)

	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, `tool Bash: when "args.command.startsWith("`)
	require.ErrorContains(t, err, `tool Edit: require "often"`)
	require.ErrorContains(t, err, `tool Write: timeout "soon"`)
}

func TestUnknownKeyInPolicyFileIsAnError(t *testing.T) {
	_, err := Parse([]byte("tools:\n  Bash:\n    requires: always\n"))
	require.ErrorContains(t, err, "field requires not found")
}

func TestSandboxAutoIsForBashsRuleOnly(t *testing.T) {
	rules, err := Parse([]byte("tools:\n  Bash:\n    require: always\n    sandbox: auto\n"))
	require.NoError(t, err)
	require.Equal(t, SandboxAuto, rules[0].Sandbox)

	_, err = Parse([]byte("tools:\n  Write:\n    require: always\n    sandbox: auto\n  Bash:\n    require: always\n    sandbox: always\n"))
	require.ErrorContains(t, err, "tool Write: sandbox: auto is for Bash's rule only")
	require.ErrorContains(t, err, `tool Bash: sandbox "always" is not "auto"`)
}

func TestShadowRulesAreReadBesideTheLiveRuleOrAlone(t *testing.T) {
	rules, err := Parse([]byte(`
tools:
  Bash:
    require: always
    shadow:
      when: args.command.contains("sudo")
  Write:
    when: '!args.file_path.startsWith("docs/")'
    timeout: 10m
    shadow: true
  Edit:
    shadow:
      require: never
`))
	require.NoError(t, err)
	require.Equal(t, []Rule{
		{Tool: "Bash", Require: RequireAlways},
		{Tool: "Bash", Require: RequireWhen, When: `args.command.contains("sudo")`, Shadow: true},
		{Tool: "Edit", Require: RequireNever, Shadow: true},
		{Tool: "Write", Require: RequireWhen, When: `!args.file_path.startsWith("docs/")`, Timeout: 10 * time.Minute, Shadow: true},
	}, rules)
}

func TestABadShadowRuleIsAnErrorNamingIt(t *testing.T) {
	_, err := Parse([]byte("tools:\n  Bash:\n    require: always\n    shadow:\n      when: args.command.startsWith(\n"))
	require.ErrorContains(t, err, `shadow rule: tool Bash: when "args.command.startsWith("`)

	_, err = Parse([]byte("tools:\n  Bash:\n    require: always\n    shadow:\n      when: 'true'\n      timeout: 10m\n"))
	require.ErrorContains(t, err, "shadow: field timeout not found: a shadow rule takes require and when")

	_, err = Parse([]byte("tools:\n  Bash:\n    require: always\n    shadow: maybe\n"))
	require.ErrorContains(t, err, "shadow is true, false, or a rule of require and when")
}

func TestRuleExamplesAreReadAsTheArgumentsAModelSends(t *testing.T) {
	rules, err := Parse([]byte(`
tools:
  Bash:
    when: args.command.contains("sudo")
    examples:
      ask:
        - {command: "sudo reboot"}
      allow:
        - command: ls -la
          timeout: 5
        - {}
`))
	require.NoError(t, err)
	require.Equal(t, Examples{Ask: []string{`{"command":"sudo reboot"}`}, Allow: []string{`{"command":"ls -la","timeout":5}`, `{}`}}, rules[0].Examples)

	_, err = Parse([]byte("tools:\n  Bash:\n    require: always\n    examples:\n      must_ask: [{command: ls}]\n"))
	require.ErrorContains(t, err, "field must_ask not found")
	_, err = Parse([]byte("tools:\n  Bash:\n    require: always\n    examples:\n      ask: [ls]\n"))
	require.ErrorContains(t, err, "cannot unmarshal !!str `ls`", "an example is a call's arguments: a mapping")
}

func TestQuorumDeclinesAndEscalateAreReadAndBadOnesNamed(t *testing.T) {
	rules, err := Parse([]byte(`
tools:
  Bash:
    require: always
    timeout: 20m
    deciders: [alice, bob]
    quorum: 2
    declines: 2
    escalate:
      - {after: 50%, to: ["role:admin"]}
      - {after: 15m, to: [carol]}
`))
	require.NoError(t, err)
	require.Equal(t, Rule{Tool: "Bash", Require: RequireAlways, Timeout: 20 * time.Minute, Deciders: []string{"alice", "bob"}, Quorum: 2, Declines: 2,
		Escalate: []Escalation{{AfterPercent: 50, To: []string{"role:admin"}}, {After: 15 * time.Minute, To: []string{"carol"}}}}, rules[0])
	require.True(t, rules[0].Voting())

	for _, tc := range []struct{ yaml, err string }{
		{"quorum: 3\n    deciders: [alice, bob]", "quorum 3 needs as many deciders, and only 2 are named"},
		{"quorum: -1", "quorum -1 is negative"},
		{"quorum: 2\n    deciders: [alice, link]", "deciders lists link or temporal, who name no person and cannot vote"},
		{"quorum: 2\n    escalate: [{after: 50%, to: [temporal]}]", "escalate step 1: to lists link or temporal"},
		{"escalate: [{after: soon, to: [bob]}]", `after "soon" is neither a percent`},
		{"escalate: [{after: 120%, to: [bob]}]", `after "120%" is not a percent between 1% and 99%`},
		{"escalate: [{after: 50%}]", "escalate step 1: to names nobody"},
		{"escalate: [{after: 50%, to: [bob]}, {after: 40%, to: [carol]}]", "escalate step 2: it comes no later than the step before it"},
		{"timeout: 10m\n    escalate: [{after: 10m, to: [bob]}]", "after 10m0s is not before the rule's timeout 10m0s"},
	} {
		_, err := Parse([]byte("tools:\n  Bash:\n    require: always\n    " + tc.yaml + "\n"))
		require.ErrorContains(t, err, tc.err, tc.yaml)
	}
	_, err = Parse([]byte("tools:\n  Bash:\n    require: always\n    quorum: 2\n    deciders: [alice, \"role:admin\"]\n"))
	require.NoError(t, err, "a role may hold more principals than it names")
}
