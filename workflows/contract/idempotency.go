package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	return "message-" + hashOf(conversationID, m.IdempotencyKey, m.Digest())
}

// Digest is what makes two messages the same message: all the sender
// sent, not the key, nor whether the API made the conversation's id from
// it (a retry may name the conversation its first attempt was told of).
func (m UserMessage) Digest() string {
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
