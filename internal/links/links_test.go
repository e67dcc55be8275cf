package links

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestALinkChecksOnlyAsSignedAndUntilItExpires(t *testing.T) {
	k, err := NewKey(strings.Repeat("s", MinSecretLength))
	require.NoError(t, err)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	l := Link{RequestID: "tollgate-conv-c-turn-1/apr-0123", Decision: "approve", ArgsDigest: ArgsDigest(`{"command":"ls"}`), Expires: now.Add(time.Hour)}
	u, err := url.Parse(k.URL("https://tollgate.example.com/", l))
	require.NoError(t, err)
	require.Equal(t, "https://tollgate.example.com"+Path, u.Scheme+"://"+u.Host+u.Path)

	got, err := k.Check(u.Query(), now)
	require.NoError(t, err)
	require.Equal(t, l, got)

	_, err = k.Check(u.Query(), now.Add(time.Hour))
	require.ErrorIs(t, err, ErrExpired)

	for param, value := range map[string]string{
		ParamRequest:  "tollgate-conv-c-turn-1/apr-9999",
		ParamDecision: "decline",
		ParamArgs:     ArgsDigest(`{"command":"rm -rf /"}`),
		ParamExpires:  "4102444800", // later, to outlive its request
	} {
		q := u.Query()
		q.Set(param, value)
		_, err := k.Check(q, now)
		require.ErrorIs(t, err, ErrBadSignature, param)
	}
	other, err := NewKey(strings.Repeat("t", MinSecretLength))
	require.NoError(t, err)
	_, err = other.Check(u.Query(), now)
	require.ErrorIs(t, err, ErrBadSignature, "another secret")

	for param, value := range map[string]string{ParamDecision: "maybe", ParamArgs: "abc", ParamExpires: "soon", ParamSig: "!!", ParamRequest: ""} {
		q := u.Query()
		q.Set(param, value)
		_, err := k.Check(q, now)
		require.ErrorIs(t, err, ErrMalformed, param)
	}
}

func TestAShortSecretIsRefused(t *testing.T) {
	_, err := NewKey("short")
	require.ErrorContains(t, err, "at least 32 characters, this one has 5")
}
