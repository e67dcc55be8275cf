package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/internal/payloads"
)

// badRequestError is something wrong with what the client sent; its message
// says what, and is shown to the client as it is.
type badRequestError struct{ msg string }

func (e *badRequestError) Error() string { return e.msg }

// badRequest returns a badRequestError with a formatted message.
func badRequest(format string, args ...any) error {
	return &badRequestError{msg: fmt.Sprintf(format, args...)}
}

// errTooLarge is the cause of a 413 whose message says which limit.
var errTooLarge = errors.New("too large")

// errUnknownTurn answers a stream request for a turn id tollgate never makes.
var errUnknownTurn = errors.New("unknown turn: not a tollgate turn id")

// errConversationEnded answers a message to a conversation whose workflow
// has closed: it takes no more, and its id starts no new one.
var errConversationEnded = errors.New("has ended (terminated, failed or cancelled) and takes no more messages; its id cannot start a new conversation: send without a conversationId, or with a new one")

// errUnknownConversation answers a request about a conversation whose id
// names none (it is another conversation's turn's).
var errUnknownConversation = errors.New("no such conversation")

// errTurnNotFound answers a stream request for a turn that does not exist
// and will not, and ends a stream whose turn never appeared in Temporal.
var errTurnNotFound = errors.New("turn not found")

// retryAfter is the Retry-After header of a 503, in seconds.
const retryAfter = "1"

// statusClientClosedRequest is nginx's status for a request its client
// abandoned; it only ever shows in logs.
const statusClientClosedRequest = 499

// errorStatus maps an error to the HTTP status and the message a client sees.
// It is the one place that decides how failures look over HTTP. server
// names the Temporal server the API uses ("Temporal at HOST:PORT"), for
// the messages of its unavailability.
func errorStatus(server string, err error) (int, string) {
	var bad *badRequestError
	var rejected *temporal.ApplicationError
	var undecodable *payloads.DecodeError
	var decodeLimit *payloads.DecodeLimitError
	switch {
	case errors.As(err, &bad):
		return http.StatusBadRequest, bad.msg
	case errors.As(err, &decodeLimit):
		return http.StatusRequestEntityTooLarge, decodeLimit.Error()
	case errors.As(err, &undecodable):
		// Its message names no folder or bucket; the log has them.
		switch undecodable.Kind {
		case payloads.DecodeBadReference:
			return http.StatusBadRequest, undecodable.Error()
		case payloads.DecodeNotStored:
			return http.StatusNotFound, undecodable.Error()
		default:
			return http.StatusInternalServerError, undecodable.Error()
		}
	case isUnauthorized(err):
		return http.StatusUnauthorized, err.Error()
	case errors.Is(err, errForbidden):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, errGateFrozen):
		return http.StatusLocked, err.Error()
	case errors.Is(err, errConversationEnded):
		return http.StatusConflict, err.Error()
	case errors.Is(err, errBodyTooLarge), errors.Is(err, errTooLarge):
		return http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, errUnsupportedMediaType):
		return http.StatusUnsupportedMediaType, err.Error()
	case errors.Is(err, errUnknownTurn), errors.Is(err, errTurnNotFound), errors.Is(err, errUnknownGrant), errors.Is(err, errUnknownConversation),
		errors.Is(err, errUnknownDelegation):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, context.Canceled):
		// The client left; nobody reads the answer. (A call Temporal
		// cancelled while the client waits is writeError's 503.)
		return statusClientClosedRequest, "request cancelled"
	case isUnavailable(err):
		return http.StatusServiceUnavailable, unavailableMessage(server, err)
	case isNotReady(err):
		// The workflow task that would have taken the request failed (on a
		// fresh cluster, a service that does not know the search
		// attributes yet): the request was not taken, and the next task
		// may take it.
		return http.StatusServiceUnavailable, "the workflow could not take the request now (its workflow task failed); send it again: " + err.Error()
	case isNotFound(err):
		return http.StatusNotFound, err.Error()
	case errors.As(err, &rejected):
		// A workflow's update validator or handler said no: the request was
		// understood but cannot be taken in the workflow's current state.
		return http.StatusConflict, rejected.Message()
	default:
		return http.StatusInternalServerError, "internal error"
	}
}

// writeError answers the request with err as {"error": "..."} and logs it
// at a level that matches who is at fault.
func writeError(c *gin.Context, log *slog.Logger, err error) {
	if errors.Is(err, context.Canceled) && c.Request.Context().Err() == nil {
		// Not this client leaving: the call was cancelled on Temporal's
		// side (a server shutting down, a shed load), which a retry may
		// get past.
		err = &cancelledByTemporalError{err: err}
	}
	status, msg := errorStatus(c.GetString(temporalKey), err)
	level := slog.LevelDebug
	switch {
	case status == http.StatusServiceUnavailable:
		level = slog.LevelWarn
	case status >= http.StatusInternalServerError:
		level = slog.LevelError
	case status == http.StatusConflict:
		level = slog.LevelInfo
	}
	log.Log(c.Request.Context(), level, "request failed",
		"method", c.Request.Method, "path", c.Request.URL.Path, "status", status, "error", err)
	if status == http.StatusServiceUnavailable {
		// Every 503 is worth trying again, and says when.
		c.Header("Retry-After", retryAfter)
	}
	c.AbortWithStatusJSON(status, gin.H{"error": msg})
}

// isNotFound reports whether err says the workflow does not exist (yet), or
// has closed where a running one was needed.
func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// isNotReady reports whether the workflow could not answer yet: a query
// came before its first workflow task, so it has no query handlers, or an
// Update was in a workflow task that failed, which did not take it.
func isNotReady(err error) bool {
	var nr *serviceerror.WorkflowNotReady
	return errors.As(err, &nr)
}

// isQueryFailed reports whether the workflow itself failed the query: it
// has no such query (it is not a turn, such as a conversation, whose ids
// look alike) or its code failed, which waiting does not mend.
func isQueryFailed(err error) bool {
	var qf *serviceerror.QueryFailed
	return errors.As(err, &qf)
}

// temporalKey is the request's gin key of "Temporal at HOST:PORT", the
// server the API uses, which the messages of a 503 name.
const temporalKey = "tollgate.temporal"

// cancelledByTemporalError is a Temporal call cancelled while its client
// still waited: on the server's side, not the client's.
type cancelledByTemporalError struct{ err error }

func (e *cancelledByTemporalError) Error() string { return e.err.Error() }

// Unwrap keeps the cause visible to errors.As, but not as a
// context.Canceled: the client did not leave.
func (e *cancelledByTemporalError) Unwrap() error {
	var sc *serviceerror.Canceled
	if errors.As(e.err, &sc) {
		return sc
	}
	return nil
}

// isUnavailable reports whether err means Temporal could not be reached,
// refused the call for load, or did not answer in time: the client may try
// again. A namespace the server says it does not know counts: an
// overloaded dev server says so of the namespace it serves (one that is
// really missing keeps answering so, and the message names it).
func isUnavailable(err error) bool {
	var (
		deadline   *serviceerror.DeadlineExceeded
		canceled   *serviceerror.Canceled
		ours       *cancelledByTemporalError
		updateWait *client.WorkflowUpdateServiceTimeoutOrCanceledError
	)
	return isServerUnavailable(err) || errors.As(err, &deadline) ||
		errors.As(err, &canceled) || errors.As(err, &ours) || errors.As(err, &updateWait) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errShed)
}

// isServerUnavailable reports whether Temporal itself said it cannot serve
// now (down, overloaded, its namespace not loaded), as opposed to a call
// of ours that ran out of time, which a query no worker answers does too.
func isServerUnavailable(err error) bool {
	var (
		unavailable *serviceerror.Unavailable
		nsUnavail   *serviceerror.NamespaceUnavailable
		nsNotFound  *serviceerror.NamespaceNotFound
		exhausted   *serviceerror.ResourceExhausted
	)
	return errors.As(err, &unavailable) || errors.As(err, &nsUnavail) ||
		errors.As(err, &nsNotFound) || errors.As(err, &exhausted)
}

// unavailableMessage says which Temporal did not serve what, and that a
// retry is welcome (Retry-After says when).
func unavailableMessage(server string, err error) string {
	server = cmp.Or(server, "Temporal")
	var (
		nsNotFound *serviceerror.NamespaceNotFound
		exhausted  *serviceerror.ResourceExhausted
		canceled   *serviceerror.Canceled
		ours       *cancelledByTemporalError
	)
	var what string
	switch {
	case errors.Is(err, errShed):
		what = "is busy: this API has as many calls to it in flight as it allows"
	case errors.As(err, &exhausted):
		what = "is overloaded and refused the call"
	case errors.As(err, &canceled), errors.As(err, &ours):
		what = "cancelled the call"
	case errors.As(err, &nsNotFound):
		what = "does not serve namespace " + strconv.Quote(nsNotFound.Namespace) + " now (an overloaded or restarting server says so)"
	case isServerUnavailable(err):
		what = "is unavailable (down, restarting or overloaded)"
	default:
		what = "did not answer in time"
	}
	return server + " " + what + "; try again in " + retryAfter + "s: " + err.Error()
}

// isRejectedUpdate reports whether an Update failed because the workflow
// did not take it: the validator rejected it (an unknown, decided or expired
// request; an unknown grant), the workflow is gone or closed, or the id was
// garbage the server refused. A decision or a client tool's result then
// answers {"accepted": false}, a revoke 404.
func isRejectedUpdate(err error) bool {
	var (
		app     *temporal.ApplicationError
		invalid *serviceerror.InvalidArgument
		precond *serviceerror.FailedPrecondition
	)
	return isNotFound(err) || errors.As(err, &app) || errors.As(err, &invalid) ||
		errors.As(err, &precond)
}
