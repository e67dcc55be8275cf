package text

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"one word too many", 8, "one word…"},
		{"héllo", 2, "h…"}, // é is two bytes: a cut after one would split it
		{"héllo", 3, "hé…"},
		{"日本語", 4, "日…"},
		{"bad \xff byte", 100, "bad \uFFFD byte"},
		{"abc", 0, "…"},
	} {
		got := Truncate(tc.in, tc.n)
		require.Equal(t, tc.want, got, "Truncate(%q, %d)", tc.in, tc.n)
		require.True(t, utf8.ValidString(got))
		require.LessOrEqual(t, len(strings.TrimSuffix(got, "…")), max(tc.n, len(tc.in)))
	}
}

func TestCutAndTrimPartialRuneNeverSplitACharacter(t *testing.T) {
	s := "aé日🙂z"
	for n := 0; n <= len(s)+1; n++ {
		cut := Cut(s, n)
		require.True(t, utf8.ValidString(cut), "Cut(%q, %d) = %q", s, n, cut)
		require.True(t, strings.HasPrefix(s, cut))
		require.LessOrEqual(t, len(cut), n)
		require.Equal(t, cut, string(TrimPartialRune([]byte(s[:min(n, len(s))]))))
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		3 * time.Minute:                       "3m",
		90 * time.Second:                      "1m30s",
		2 * time.Hour:                         "2h",
		24 * time.Hour:                        "24h",
		2*time.Hour + 30*time.Minute:          "2h30m",
		500 * time.Millisecond:                "500ms",
		time.Hour + time.Minute + time.Second: "1h1m1s",
	} {
		require.Equal(t, want, Duration(d), "%v", d)
	}
}

func TestRedactURLHidesThePasswordWhereverTheURLHoldsIt(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://tollgate:s3cret@db:5432/tollgate":                            "postgres://tollgate:xxxxx@db:5432/tollgate",
		"postgres://tollgate@db:5432/tollgate?password=s3cret&sslmode=disable":   "postgres://tollgate@db:5432/tollgate?password=xxxxx&sslmode=disable",
		"postgresql://db/tollgate?user=tollgate&PassWord=s3cret&sslpassword=k3y": "postgresql://db/tollgate?PassWord=xxxxx&sslpassword=xxxxx&user=tollgate",
		"postgres://u:p%40ss@db/x?application_name=tollgate":                     "postgres://u:xxxxx@db/x?application_name=tollgate",
		"postgres://tollgate@db:5432/tollgate?sslmode=require":                   "postgres://tollgate@db:5432/tollgate?sslmode=require",
		"postgres://u:s3cret@db/x?password=s3cret":                               "postgres://u:xxxxx@db/x?password=xxxxx",
		"postgres://u:s3cret@[::1%zone/x":                                        "postgres://…",
	} {
		got := RedactURL(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, "s3cret")
	}
}
