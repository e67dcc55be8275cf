package protocol

// TokenPiece is one token event of a model call's answer, as the turn logs
// it: Data continues the text, or with Reset starts it again.
type TokenPiece struct {
	Data  string `json:"data"`
	Reset bool   `json:"reset,omitempty"`
}

// TokenProgress is the heartbeat detail of a model call that streams by
// heartbeat, and the detail of its errors: the token events the call has
// made so far, every attempt's in order. Each one the server holds begins
// with every one it held before, so the token events the API shows from it
// while the call runs are the first the turn logs when the call ends,
// however it ends.
type TokenProgress struct {
	Step   int          `json:"step"`
	Pieces []TokenPiece `json:"pieces"`
}
