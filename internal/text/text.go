// Package text holds the few string helpers tollgate's packages share:
// cutting text to a size without breaking a character, writing a
// duration as a person would, and hiding a URL's password.
package text

import (
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// RedactURL returns a URL (a database's DSN, say) fit for a log or an
// error: the password of its user info, and every query parameter whose
// name says it holds a secret (password, sslpassword, …secret…,
// …token…), become xxxxx. PostgreSQL takes a password either way
// (postgres://user:pw@host/db or postgres://user@host/db?password=pw). A
// string that is not a URL becomes its scheme and "…".
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		scheme, _, _ := strings.Cut(s, "://")
		return scheme + "://…"
	}
	q := u.Query()
	hidden := false
	for name := range q {
		lower := strings.ToLower(name)
		if strings.Contains(lower, "password") || strings.Contains(lower, "secret") || strings.Contains(lower, "token") {
			for i := range q[name] {
				q[name][i] = "xxxxx"
			}
			hidden = true
		}
	}
	if hidden {
		u.RawQuery = q.Encode()
	}
	return u.Redacted() // the user info's password is xxxxx too
}

// Truncate cuts s to at most n bytes of valid UTF-8, marking a cut with
// "…" (which the n bytes do not count). Bytes that are not UTF-8 become
// U+FFFD first: a model server's error body may hold any bytes, and what
// goes into a Temporal failure, summary or event must be UTF-8.
func Truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	return Cut(s, n) + "…"
}

// Cut returns at most n bytes of s, without splitting a character.
func Cut(s string, n int) string {
	n = min(max(n, 0), len(s))
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// TrimPartialRune drops the incomplete character a cut left at the end of
// b.
func TrimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// Duration writes d without the zero units time.Duration.String adds: 3m
// rather than 3m0s, 2h rather than 2h0m0s.
func Duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Plural is word, with an s unless n is 1.
func Plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
