package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAStandInDecidesWhereTheOneStoodInForMayAndCountsAsThem(t *testing.T) {
	leads := &Rule{Tool: "Write", Deciders: []string{"alice", "role:admin"}}
	fourEyes := &Rule{Tool: "Write", SecondPerson: true}
	cases := []struct {
		name                                string
		rule                                *Rule
		principal, role, onBehalfOf, sender string
		want                                string
	}{
		{"bob alone is no decider", leads, "bob", "approve", "", "dev", "decided only by"},
		{"bob for alice is", leads, "bob", "approve", "alice", "dev", ""},
		{"bob for carol is not", leads, "bob", "approve", "carol", "dev", "nor by \"carol\""},
		{"an admin for carol decides as themself", leads, "bob", "admin", "carol", "dev", ""},
		{"four eyes: bob for alice on dev's call", fourEyes, "bob", "approve", "alice", "dev", ""},
		{"four eyes: bob for alice on alice's call", fourEyes, "bob", "approve", "alice", "alice", "second person"},
		{"four eyes: bob for alice on bob's call", fourEyes, "bob", "approve", "alice", "bob", "second person"},
		{"four eyes: alice on her own call", fourEyes, "alice", "approve", "", "alice", "second person"},
	}
	for _, c := range cases {
		err := c.rule.MayDecideFor(c.principal, c.role, nil, c.onBehalfOf, c.sender)
		if c.want == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorContains(t, err, c.want, c.name)
	}
}

func TestARoleDeciderIsThePermissionOrATeamRoleOfTheDecision(t *testing.T) {
	finance := &Rule{Tool: "Pay", Deciders: []string{"role:finance", "alice"}}
	cases := []struct {
		name             string
		principal, role  string
		teams            []string
		onBehalfOf, want string
	}{
		{"carol in finance", "carol", "approve", []string{"finance", "oncall"}, "", ""},
		{"dave in no team", "dave", "approve", nil, "", "decided only by role:finance, alice"},
		{"erin on call only", "erin", "approve", []string{"oncall"}, "", "decided only by"},
		{"a permission named finance", "frank", "finance", nil, "", ""},
		{"an empty team names no role", "gina", "approve", []string{""}, "", "decided only by"},
		{"dave for alice", "dave", "approve", nil, "alice", ""},
		{"dave for carol: carol's teams are not dave's", "dave", "approve", nil, "carol", "nor by \"carol\""},
		{"carol for dave decides as herself", "carol", "approve", []string{"finance"}, "dave", ""},
	}
	for _, c := range cases {
		err := finance.MayDecideFor(c.principal, c.role, c.teams, c.onBehalfOf, "dev")
		if c.want == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorContains(t, err, c.want, c.name)
	}
	// A rule that names an empty role takes no decision by an empty team.
	require.Error(t, (&Rule{Tool: "Pay", Deciders: []string{"role:"}}).MayDecide("gina", "", []string{""}, "dev"))
}

func TestAnEscalationStepNeverWidensARuleThatNamesNoDeciders(t *testing.T) {
	fourEyes := &Rule{Tool: "Write", SecondPerson: true}
	require.Same(t, fourEyes, fourEyes.WithDeciders([]string{"role:oncall"}), "anyone may decide already: the step only notifies")
	require.ErrorContains(t, fourEyes.WithDeciders([]string{"dev"}).MayDecide("dev", "approve", nil, "dev"), "second person")

	leads := &Rule{Tool: "Write", Deciders: []string{"alice"}, SecondPerson: true}
	wider := leads.WithDeciders([]string{"bob", "dev"})
	require.Equal(t, []string{"alice"}, leads.Deciders, "the rule itself is unchanged")
	require.NoError(t, wider.MayDecide("bob", "approve", nil, "dev"))
	require.ErrorContains(t, wider.MayDecide("dev", "approve", nil, "dev"), "second person", "a step that names the sender does not let them decide their own call")
	require.Nil(t, (*Rule)(nil).WithDeciders([]string{"bob"}))
}
