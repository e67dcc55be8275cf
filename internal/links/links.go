// Package links makes and checks signed one-click decision links: a
// notice carries one to approve and one to decline each call, so a person
// reading it in a chat can decide without opening the console.
//
// A link names one request, one decision, the digest of the arguments the
// notice showed and when it expires, and carries an HMAC-SHA256 of them
// under a secret the worker (which signs) and the API (which checks)
// share. Nothing else makes it valid: no token, no cookie. It is refused
// once it expires, once the request is decided (the turn takes only the
// first decision), and when the call it names is not the one waiting.
package links

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MinSecretLength is the shortest secret a Key accepts.
const MinSecretLength = 32

// Path is where the API serves links.
const Path = "/decide"

// Query parameters of a link.
const (
	ParamRequest  = "request"
	ParamDecision = "decision"
	ParamArgs     = "args"
	ParamExpires  = "expires"
	ParamSig      = "sig"
)

// Link is what one link says.
type Link struct {
	RequestID string
	// Decision is approve or decline.
	Decision string
	// ArgsDigest is ArgsDigest of the arguments the notice showed.
	ArgsDigest string
	Expires    time.Time
}

// Errors of Check.
var (
	ErrMalformed    = errors.New("not a decision link")
	ErrBadSignature = errors.New("the link's signature does not match: it was changed, or signed with another secret")
	ErrExpired      = errors.New("the link has expired")
)

// Key signs and checks links.
type Key struct {
	secret []byte
}

// String and GoString keep the secret out of anything printed.
func (Key) String() string   { return "links.Key{<secret>}" }
func (Key) GoString() string { return "links.Key{<secret>}" }

// NewKey makes a key of secret, which must be at least MinSecretLength
// bytes.
func NewKey(secret string) (Key, error) {
	if len(secret) < MinSecretLength {
		return Key{}, fmt.Errorf("a link secret needs at least %d characters, this one has %d", MinSecretLength, len(secret))
	}
	return Key{secret: []byte(secret)}, nil
}

// Derive is a key for purpose made from the link secret (its HMAC-SHA256
// of purpose): another use of the secret every instance shares, such as
// GET /approvals' page tokens, without a MAC of one purpose ever being
// one of another's or of a link.
func (k Key) Derive(purpose string) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte("derive\x00" + purpose))
	return m.Sum(nil)
}

// ArgsDigest is the hex SHA-256 of a call's arguments.
func ArgsDigest(arguments string) string {
	sum := sha256.Sum256([]byte(arguments))
	return hex.EncodeToString(sum[:])
}

// sign is the HMAC of l: every field, each on a line of its own after a
// version line (no field holds a newline: ids and digests are plain
// ASCII, and Check refuses anything else).
func (k Key) sign(l Link) []byte {
	m := hmac.New(sha256.New, k.secret)
	fmt.Fprintf(m, "tollgate-link v1\n%s\n%s\n%s\n%d", l.RequestID, l.Decision, l.ArgsDigest, l.Expires.Unix())
	return m.Sum(nil)
}

// URL is the link for l under base, the API's address as people reach it
// (TOLLGATE_PUBLIC_URL).
func (k Key) URL(base string, l Link) string {
	q := url.Values{}
	q.Set(ParamRequest, l.RequestID)
	q.Set(ParamDecision, l.Decision)
	q.Set(ParamArgs, l.ArgsDigest)
	q.Set(ParamExpires, strconv.FormatInt(l.Expires.Unix(), 10))
	q.Set(ParamSig, base64.RawURLEncoding.EncodeToString(k.sign(l)))
	return strings.TrimSuffix(base, "/") + Path + "?" + q.Encode()
}

// Check reads a link's parameters and returns what it says when its
// signature matches and it has not expired at now.
func (k Key) Check(q url.Values, now time.Time) (Link, error) {
	l := Link{RequestID: q.Get(ParamRequest), Decision: q.Get(ParamDecision), ArgsDigest: q.Get(ParamArgs)}
	exp, err := strconv.ParseInt(q.Get(ParamExpires), 10, 64)
	sig, sigErr := base64.RawURLEncoding.DecodeString(q.Get(ParamSig))
	if err != nil || sigErr != nil || l.RequestID == "" || strings.ContainsAny(l.RequestID, "\n\r") ||
		(l.Decision != "approve" && l.Decision != "decline") || len(l.ArgsDigest) != 2*sha256.Size {
		return Link{}, ErrMalformed
	}
	l.Expires = time.Unix(exp, 0).UTC()
	if !hmac.Equal(sig, k.sign(l)) {
		return Link{}, ErrBadSignature
	}
	if !now.Before(l.Expires) {
		return Link{}, fmt.Errorf("%w (at %s)", ErrExpired, l.Expires.UTC().Format(time.RFC3339))
	}
	return l, nil
}
