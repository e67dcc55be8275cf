package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAPITokensAreReadAsTokenPrincipalPairs(t *testing.T) {
	c, err := Load(env(map[string]string{
		"TOLLGATE_API_TOKENS": " aaaaaaaaaaaaaaaa1:alice , bbbbbbbbbbbbbbbb-_.~+/==:ops-bot@example.com,,cccccccccccccccc:alice",
	}))
	require.NoError(t, err)
	require.Equal(t, []APIToken{
		{Token: "aaaaaaaaaaaaaaaa1", Principal: "alice"},
		{Token: "bbbbbbbbbbbbbbbb-_.~+/==", Principal: "ops-bot@example.com"},
		{Token: "cccccccccccccccc", Principal: "alice"}, // a second token for alice, as in a rotation
	}, c.APITokens)
}

func TestAPITokensUnsetMeansNone(t *testing.T) {
	for _, v := range []string{"", "  "} {
		c, err := Load(env(map[string]string{"TOLLGATE_API_TOKENS": v}))
		require.NoError(t, err)
		require.Nil(t, c.APITokens)
	}
}

func TestAPITokensInTheConfigFileMayBeAList(t *testing.T) {
	file := writeFile(t, "TOLLGATE_API_TOKENS: [\"aaaaaaaaaaaaaaaa:alice\", \"bbbbbbbbbbbbbbbb:bob\"]\n")
	c, err := Load(env(map[string]string{"TOLLGATE_CONFIG_FILE": file}))
	require.NoError(t, err)
	require.Equal(t, []APIToken{{"aaaaaaaaaaaaaaaa", "alice"}, {"bbbbbbbbbbbbbbbb", "bob"}}, c.APITokens)
}

func TestBadAPITokensAreNamedByPositionAndNeverShown(t *testing.T) {
	const secret = "S3cretS3cretS3cret"
	for _, tc := range []struct {
		name, value, want string
	}{
		{"no colon", secret, "entry 1 (not shown): not a token:principal pair"},
		{"no token", ":alice", "entry 1 (not shown): the token before ':' is empty"},
		{"no principal", secret + ":", "entry 1 (not shown): the principal after ':' is empty"},
		{"short token", "aaaaaaaaaaaaaaaa:alice,short" + secret[:6] + ":bob", "entry 2 (not shown): the token is 11 characters long; it must have at least 16"},
		{"token with a space", "S3cret S3cretS3cret:alice", "the token may hold only letters, digits and -._~+/"},
		{"principal not a name", secret + ":alice smith", "the principal must be a name"},
		// Written the wrong way round, the principal is the token: it is
		// not shown either.
		{"swapped", "alice:" + secret, "entry 1 (not shown): the token is 5 characters long"},
		{"principal with a colon", secret + ":a:" + secret, "the principal must be a name"},
		{"same token twice", secret + ":alice," + secret + ":bob", "entry 2 (not shown): the same token as entry 1"},
		{"only commas", " , ,", "TOLLGATE_API_TOKENS: no token:principal pairs in the list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(env(map[string]string{"TOLLGATE_API_TOKENS": tc.value}))
			require.ErrorContains(t, err, "TOLLGATE_API_TOKENS: ")
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "S3cret", "an error never shows a token")
		})
	}
}

func TestAPITokenNeverPrintsItsToken(t *testing.T) {
	tok := APIToken{Token: "S3cretS3cretS3cret", Principal: "alice"}
	c := Config{APITokens: []APIToken{tok}}
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c.APITokens), fmt.Sprintf("%#v", tok), tok.String()} {
		require.NotContains(t, s, "S3cret")
		require.True(t, strings.Contains(s, "alice"), s)
	}
}
