package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// slackSecret is a signing secret as long as Slack's.
const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"

func TestSlackUsersMapUserIdsToPrincipals(t *testing.T) {
	c, err := LoadFor(API, env(map[string]string{
		EnvSlackSigningSecret: slackSecret,
		EnvSlackUsers:         " U01ABC=alice , W02DEF=bob,",
		EnvSlackResponseURL:   "http://127.0.0.1:9999/slack/",
	}))
	require.NoError(t, err)
	require.Equal(t, Slack{SigningSecret: slackSecret, Users: map[string]string{"U01ABC": "alice", "W02DEF": "bob"}, ResponseURL: "http://127.0.0.1:9999/slack/"}, c.Slack)
	require.NotContains(t, c.Slack.String(), slackSecret)
	require.NotContains(t, c.Slack.GoString(), slackSecret)
}

func TestSlackIsOffUnlessItsSigningSecretIsSet(t *testing.T) {
	c, err := Load(env(nil))
	require.NoError(t, err)
	require.Empty(t, c.Slack.SigningSecret)
	require.Equal(t, DefaultSlackResponseURL, c.Slack.ResponseURL)
}

func TestTheWorkerOnlyAsksWhetherTheSigningSecretIsSet(t *testing.T) {
	c, err := LoadFor(Worker, env(map[string]string{EnvSlackSigningSecret: slackSecret, EnvSlackUsers: "not checked here"}))
	require.NoError(t, err)
	require.NotEmpty(t, c.Slack.SigningSecret)
	require.Nil(t, c.Slack.Users)
}

func TestBadSlackSettingsAreNamedWithTheBadEntry(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{EnvSlackSigningSecret: slackSecret}, `TOLLGATE_SLACK_USERS="": required with TOLLGATE_SLACK_SIGNING_SECRET`},
		{map[string]string{EnvSlackUsers: "U01ABC=alice"}, `TOLLGATE_SLACK_SIGNING_SECRET="": required with TOLLGATE_SLACK_USERS`},
		{map[string]string{EnvSlackSigningSecret: "short", EnvSlackUsers: "U01ABC=alice"}, `TOLLGATE_SLACK_SIGNING_SECRET="<secret>": is 5 characters long`},
		{map[string]string{EnvSlackSigningSecret: slackSecret, EnvSlackUsers: "U01ABC=alice,U02DEF"}, `entry "U02DEF" is not a USERID=principal pair`},
		{map[string]string{EnvSlackSigningSecret: slackSecret, EnvSlackUsers: "U01ABC=alice,alice=U02DEF"}, `entry "alice=U02DEF": "alice" is not a Slack user id`},
		{map[string]string{EnvSlackSigningSecret: slackSecret, EnvSlackUsers: "U01ABC=al ice"}, `entry "U01ABC=al ice": the principal must be a name`},
		{map[string]string{EnvSlackSigningSecret: slackSecret, EnvSlackUsers: "U01ABC=link"}, `entry "U01ABC=link": the principal "link" is who decisions through a signed link`},
		{map[string]string{EnvSlackSigningSecret: slackSecret, EnvSlackUsers: "U01ABC=alice,U01ABC=bob"}, `entry "U01ABC=bob": user U01ABC is mapped twice`},
		{map[string]string{EnvSlackSigningSecret: slackSecret, EnvSlackUsers: "U01ABC=alice", EnvSlackResponseURL: "hooks.slack.com"}, `TOLLGATE_SLACK_RESPONSE_URL="hooks.slack.com": not an http(s) URL`},
	} {
		_, err := LoadFor(API, env(tc.vars))
		require.ErrorContains(t, err, tc.want, "%v", tc.vars)
		require.NotContains(t, err.Error(), slackSecret)
	}
}
