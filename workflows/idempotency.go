package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"time"
)

// How long, and how many, idempotency keys a conversation keeps: a retry
// of a message within the window gets the message's turn. The count bounds
// what continue-as-new carries.
const (
	messageKeyWindow = 24 * time.Hour
	maxMessageKeys   = 1000
)

// MessageKey is the idempotency key of a message: the client's key, of
// the principal that sent it, so that two people's keys never meet. It is
// a digest, so what the conversation keeps is short whatever the client
// sent.
func MessageKey(principal, clientKey string) string {
	return hashOf(principal, clientKey)
}

// MessageUpdateID is the Update ID of a message with an idempotency key:
// the same for a retry of the message to the same conversation, so that
// the server itself answers a retry of an Update it still holds (one
// whose answer was lost, or in flight) with that Update's outcome. The
// conversation's own record of its keys (TakenKey) covers what the server
// forgets: a run that continued as new knows no Update of the run before.
func MessageUpdateID(conversationID string, m UserMessage) string {
	return "message-" + hashOf(conversationID, m.IdempotencyKey, m.digest())
}

// digest is what makes two messages the same message: all the sender
// sent, not the key, nor whether the API made the conversation's id from
// it (a retry may name the conversation its first attempt was told of).
func (m UserMessage) digest() string {
	m.IdempotencyKey, m.FirstMessage = "", false
	b, _ := json.Marshal(m) // a struct of strings, bools and specs always encodes
	return hashOf(string(b))
}

// hashOf is the first 128 bits of the SHA-256 of parts, each ended by a
// zero byte, in hex.
func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// errKeyReused refuses a message whose idempotency key the conversation
// took for another message.
var errKeyReused = errors.New("this Idempotency-Key was sent with another message to this conversation: send a new key with a new message")

// errConversationTaken refuses a FirstMessage to a conversation that
// another message started.
var errConversationTaken = errors.New("the conversation this Idempotency-Key names was started by another message (or by this one more than a day ago, when the conversation forgot the key): send the message with a new key")

// checkKey says whether m may be taken: its key, if any, is new or names
// this very message, and a FirstMessage starts the conversation or is a
// retry of the message that did.
func (c *conversation) checkKey(m UserMessage) error {
	k, ok := c.takenKey(m.IdempotencyKey)
	switch {
	case ok && k.Digest != m.digest():
		return errKeyReused
	case m.FirstMessage && c.turns > 0 && !ok:
		return errConversationTaken
	}
	return nil
}

// takenKey returns the message the conversation took with key, if any.
func (c *conversation) takenKey(key string) (TakenKey, bool) {
	if key == "" {
		return TakenKey{}, false
	}
	i := slices.IndexFunc(c.keys, func(k TakenKey) bool { return k.Key == key })
	if i < 0 {
		return TakenKey{}, false
	}
	return c.keys[i], true
}

// rememberKey records that message m became turn n at now (workflow
// time), and forgets the keys past the window and beyond the count.
func (c *conversation) rememberKey(now time.Time, m UserMessage, n int) {
	if m.IdempotencyKey == "" {
		return
	}
	c.keys = slices.DeleteFunc(c.keys, func(k TakenKey) bool { return now.Sub(k.At) >= messageKeyWindow })
	c.keys = append(c.keys, TakenKey{Key: m.IdempotencyKey, Digest: m.digest(), Turn: n, At: now})
	if extra := len(c.keys) - maxMessageKeys; extra > 0 {
		c.keys = slices.Delete(c.keys, 0, extra)
	}
}
