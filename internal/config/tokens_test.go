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
		{Token: "aaaaaaaaaaaaaaaa1", Principal: "alice", Roles: DefaultRoles},
		{Token: "bbbbbbbbbbbbbbbb-_.~+/==", Principal: "ops-bot@example.com", Roles: DefaultRoles},
		{Token: "cccccccccccccccc", Principal: "alice", Roles: DefaultRoles}, // a second token for alice, as in a rotation
	}, c.APITokens)
}

func TestAPITokensCarryRolesAndDefaultToChatAndApprove(t *testing.T) {
	c, err := Load(env(map[string]string{
		"TOLLGATE_API_TOKENS": "aaaaaaaaaaaaaaaa:alice:approve, bbbbbbbbbbbbbbbb:ci:chat+bypass+chat, cccccccccccccccc:root:admin, dddddddddddddddd:bob",
	}))
	require.NoError(t, err)
	require.Equal(t, []APIToken{
		{Token: "aaaaaaaaaaaaaaaa", Principal: "alice", Roles: []string{RoleApprove}},
		{Token: "bbbbbbbbbbbbbbbb", Principal: "ci", Roles: []string{RoleBypass, RoleChat}},
		{Token: "cccccccccccccccc", Principal: "root", Roles: []string{RoleAdmin}},
		{Token: "dddddddddddddddd", Principal: "bob", Roles: []string{RoleApprove, RoleChat}},
	}, c.APITokens)
	require.False(t, c.APITokens[0].Has(RoleChat))
	require.True(t, c.APITokens[1].Has(RoleBypass))
	require.True(t, c.APITokens[2].Has(RoleBypass), "admin may do everything")
	require.False(t, c.APITokens[3].Has(RoleBypass))
}

// A word among a token's roles that is not a permission is a team role:
// it gives no permission, and a token that names team roles must name its
// permissions too, so a misspelt permission never leaves it the defaults.
func TestAPITokensCarryTeamRolesBesidesTheirPermissions(t *testing.T) {
	c, err := Load(env(map[string]string{
		"TOLLGATE_API_TOKENS": "aaaaaaaaaaaaaaaa:carol:approve+oncall+finance, bbbbbbbbbbbbbbbb:dave:approve, cccccccccccccccc:erin:chat+oncall+site_reliability-2+oncall, dddddddddddddddd:root:admin+finance",
	}))
	require.NoError(t, err)
	require.Equal(t, []APIToken{
		{Token: "aaaaaaaaaaaaaaaa", Principal: "carol", Roles: []string{RoleApprove}, Teams: []string{"finance", "oncall"}},
		{Token: "bbbbbbbbbbbbbbbb", Principal: "dave", Roles: []string{RoleApprove}},
		{Token: "cccccccccccccccc", Principal: "erin", Roles: []string{RoleChat}, Teams: []string{"oncall", "site_reliability-2"}},
		{Token: "dddddddddddddddd", Principal: "root", Roles: []string{RoleAdmin}, Teams: []string{"finance"}},
	}, c.APITokens)
	require.False(t, c.APITokens[0].Has(RoleChat), "a team role gives no permission")
	require.False(t, c.APITokens[0].Has("oncall"), "Has asks about permissions only")

	_, err = Load(env(map[string]string{"TOLLGATE_API_TOKENS": "aaaaaaaaaaaaaaaa:bot:chta"}))
	require.ErrorContains(t, err, "entry 1 (not shown): its roles name team roles but no permission", "chat misspelt is no team role that leaves the token chat+approve")
}

func TestAPISafetySwitchesDefaultOffAndOriginsAreChecked(t *testing.T) {
	c, err := Load(env(nil))
	require.NoError(t, err)
	require.False(t, c.AllowBypass)
	require.False(t, c.AllowUnauthenticated)
	require.Empty(t, c.AllowedOrigins)

	c, err = Load(env(map[string]string{
		"TOLLGATE_ALLOW_BYPASS": "true", "TOLLGATE_ALLOW_UNAUTHENTICATED": "1",
		"TOLLGATE_ALLOWED_ORIGINS": "https://console.example.com, http://127.0.0.1:3000/",
	}))
	require.NoError(t, err)
	require.True(t, c.AllowBypass)
	require.True(t, c.AllowUnauthenticated)
	require.Equal(t, []string{"https://console.example.com", "http://127.0.0.1:3000"}, c.AllowedOrigins)

	_, err = Load(env(map[string]string{"TOLLGATE_ALLOW_BYPASS": "yes please", "TOLLGATE_ALLOWED_ORIGINS": "https://example.com/app,*"}))
	require.ErrorContains(t, err, `TOLLGATE_ALLOW_BYPASS="yes please": not true or false`)
	require.ErrorContains(t, err, `TOLLGATE_ALLOWED_ORIGINS="https://example.com/app": not an origin`)
	require.ErrorContains(t, err, `TOLLGATE_ALLOWED_ORIGINS="*": not an origin`)
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
	require.Equal(t, []APIToken{{Token: "aaaaaaaaaaaaaaaa", Principal: "alice", Roles: DefaultRoles}, {Token: "bbbbbbbbbbbbbbbb", Principal: "bob", Roles: DefaultRoles}}, c.APITokens)
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
		{"a token where the roles go", "aaaaaaaaaaaaaaaa:a:" + secret, "entry 1 (not shown): role 1 after the second ':' is neither a permission (chat, approve, bypass, admin) nor a team role's name"},
		{"a lowercase token where the roles go", "aaaaaaaaaaaaaaaa:a:approve+" + strings.Repeat("s3cret", 6), "entry 1 (not shown): role 2 after the second ':' is neither"},
		{"a role with capitals", secret + ":alice:chat+Root", "role 2 after the second ':' is neither"},
		{"a role with a space", secret + ":alice:chat+on call", "role 2 after the second ':' is neither"},
		{"a role starting with a digit", secret + ":alice:1st-line", "role 1 after the second ':' is neither"},
		{"an empty role", secret + ":alice:approve++oncall", "role 2 after the second ':' is neither"},
		{"no role after the colon", secret + ":alice:", "role 1 after the second ':' is neither"},
		{"same token twice", secret + ":alice," + secret + ":bob", "entry 2 (not shown): the same token as entry 1"},
		{"only commas", " , ,", "TOLLGATE_API_TOKENS: no token:principal pairs in the list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(env(map[string]string{"TOLLGATE_API_TOKENS": tc.value}))
			require.ErrorContains(t, err, "TOLLGATE_API_TOKENS: ")
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, strings.ToLower(err.Error()), "s3cret", "an error never shows a token")
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

// A token named link or temporal would decide as a signed link or a
// Temporal signal are recorded: the ledger could not tell them apart, and
// a rule whose deciders list link (to take links) would take the token.
func TestAPITokensMayNotBeNamedAsLinksAndSignalsAreRecorded(t *testing.T) {
	for _, name := range []string{"link", "temporal"} {
		_, err := Load(env(map[string]string{"TOLLGATE_API_TOKENS": "aaaaaaaaaaaaaaaa:alice, bbbbbbbbbbbbbbbb:" + name + ":approve"}))
		require.ErrorContains(t, err, `TOLLGATE_API_TOKENS: entry 2 (not shown): the principal "`+name+`" is who decisions through a signed link`)
		require.NotContains(t, err.Error(), "bbbbbbbbbbbbbbbb", "the token is not shown")
	}
}
