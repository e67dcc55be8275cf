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
		err := c.rule.MayDecideFor(c.principal, c.role, c.onBehalfOf, c.sender)
		if c.want == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorContains(t, err, c.want, c.name)
	}
}

func TestAnEscalationStepNeverWidensARuleThatNamesNoDeciders(t *testing.T) {
	fourEyes := &Rule{Tool: "Write", SecondPerson: true}
	require.Same(t, fourEyes, fourEyes.WithDeciders([]string{"role:oncall"}), "anyone may decide already: the step only notifies")
	require.ErrorContains(t, fourEyes.WithDeciders([]string{"dev"}).MayDecide("dev", "approve", "dev"), "second person")

	leads := &Rule{Tool: "Write", Deciders: []string{"alice"}, SecondPerson: true}
	wider := leads.WithDeciders([]string{"bob", "dev"})
	require.Equal(t, []string{"alice"}, leads.Deciders, "the rule itself is unchanged")
	require.NoError(t, wider.MayDecide("bob", "approve", "dev"))
	require.ErrorContains(t, wider.MayDecide("dev", "approve", "dev"), "second person", "a step that names the sender does not let them decide their own call")
	require.Nil(t, (*Rule)(nil).WithDeciders([]string{"bob"}))
}
