package main

import (
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/internal/config"
)

// errShed refuses a request that would put one more Temporal call in
// flight than the API allows (config.EnvMaxTemporalCalls): a 503 with
// Retry-After, at once, rather than one more call queued behind a
// Temporal that is already slow to answer.
var errShed = fmt.Errorf("the API has as many Temporal calls in flight as it allows")

// callLimit bounds the Temporal calls the API's requests have in flight;
// a nil callLimit bounds nothing.
type callLimit chan struct{}

// newCallLimit allows n calls at once; n < 1 allows any number.
func newCallLimit(n int) callLimit {
	if n < 1 {
		return nil
	}
	return make(callLimit, n)
}

// acquire takes a place for a call of what, or refuses with errShed when
// every place is taken. The caller must release a place it got.
func (l callLimit) acquire(what string) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	default:
		return nil, fmt.Errorf("%s: %w (%s=%d)", what, errShed, config.EnvMaxTemporalCalls, cap(l))
	}
}

// limitTemporalCalls holds a place of the call limit for the whole of a
// request that calls Temporal and then answers (a decision, a query, a
// list); streams take theirs only while they start their turn.
func (s *Server) limitTemporalCalls(c *gin.Context) {
	release, err := s.calls.acquire(c.Request.Method + " " + c.FullPath())
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	defer release()
	c.Next()
}
