package workflows

import (
	"errors"
	"slices"
	"time"

	"github.com/tollgate/tollgate/workflows/contract"
)

// How long, and how many, idempotency keys a conversation keeps: a retry
// of a message within the window gets the message's turn. The count bounds
// what continue-as-new carries.
const (
	messageKeyWindow = 24 * time.Hour
	maxMessageKeys   = 1000
)

// errKeyReused refuses a message whose idempotency key the conversation
// took for another message.
var errKeyReused = errors.New("this Idempotency-Key was sent with another message to this conversation: send a new key with a new message")

// errConversationTaken refuses a FirstMessage to a conversation that
// another message started.
var errConversationTaken = errors.New("the conversation this Idempotency-Key names was started by another message (or by this one more than a day ago, when the conversation forgot the key): send the message with a new key")

// checkKey says whether m may be taken: its key, if any, is new or names
// this very message, and a FirstMessage starts the conversation or is a
// retry of the message that did.
func (c *conversation) checkKey(m contract.UserMessage) error {
	k, ok := c.takenKey(m.IdempotencyKey)
	switch {
	case ok && k.Digest != m.Digest():
		return errKeyReused
	case m.FirstMessage && c.turns > 0 && !ok:
		return errConversationTaken
	}
	return nil
}

// takenKey returns the message the conversation took with key, if any.
func (c *conversation) takenKey(key string) (contract.TakenKey, bool) {
	if key == "" {
		return contract.TakenKey{}, false
	}
	i := slices.IndexFunc(c.keys, func(k contract.TakenKey) bool { return k.Key == key })
	if i < 0 {
		return contract.TakenKey{}, false
	}
	return c.keys[i], true
}

// rememberKey records that message m became turn n at now (workflow
// time), and forgets the keys past the window and beyond the count.
func (c *conversation) rememberKey(now time.Time, m contract.UserMessage, n int) {
	if m.IdempotencyKey == "" {
		return
	}
	c.keys = slices.DeleteFunc(c.keys, func(k contract.TakenKey) bool { return now.Sub(k.At) >= messageKeyWindow })
	c.keys = append(c.keys, contract.TakenKey{Key: m.IdempotencyKey, Digest: m.Digest(), Turn: n, At: now})
	if extra := len(c.keys) - maxMessageKeys; extra > 0 {
		c.keys = slices.Delete(c.keys, 0, extra)
	}
}
