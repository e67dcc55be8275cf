package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// eventSource is where a turn's events live: Temporal in production
// (temporalSource), a fake in tests.
type eventSource interface {
	// Events returns the turn's events after sequence number after. closed
	// says the turn's workflow has closed, so its log is final and may be
	// read without a worker.
	Events(ctx context.Context, turnID string, after int, closed bool) (contract.EventsResponse, error)
	// Watch blocks while the turn's workflow runs, calling changed (from any
	// goroutine, never blocking) whenever the turn may have new events. It
	// returns nil once the workflow has closed, a NotFound error while the
	// workflow does not exist, or another error when watching failed.
	Watch(ctx context.Context, turnID string, changed func()) error
	// Exists reports whether the turn exists or is sure to: its workflow
	// exists, or its conversation has given out its number (a turn queued
	// behind another starts when that one stops). An error means it could
	// not tell.
	Exists(ctx context.Context, turnID string) (bool, error)
	// Live returns the token events in the heartbeat details of the turn's
	// model call activityID (contract.LiveTokens); running is false once
	// that call is no longer pending.
	Live(ctx context.Context, turnID, activityID string) (pieces []protocol.TokenPiece, running bool, err error)
	// Conversation returns the state of a conversation (its turns, the one
	// that runs, how many wait), to learn whether a turn that does not
	// exist yet waits in its queue.
	Conversation(ctx context.Context, conversationID string) (contract.ConversationState, error)
}

// hubSettings tunes the pollers; tests shorten them.
type hubSettings struct {
	// queryTimeout bounds one read of a turn's events, so a query that no
	// worker answers is retried rather than waited on forever.
	queryTimeout time.Duration
	// minBackoff and maxBackoff bound the wait before a failed read or watch
	// is tried again.
	minBackoff, maxBackoff time.Duration
	// notFoundTimeout is how long a turn may not exist before its streams
	// end with an error, unless its conversation says it is queued there
	// (queued turns are waited for as long as they are).
	notFoundTimeout time.Duration
	// startingFor is how long a turn that does not exist yet is looked for
	// every minBackoff, before the waits grow. A turn sent to an idle
	// conversation exists before POST /chat/stream learns its id (patch
	// level 2); one queued behind a running turn starts moments after that
	// turn stops, and so does any turn of an older conversation, and a
	// watcher that had backed off would find it up to maxBackoff late.
	startingFor time.Duration
	// closedRetries is how many failed reads of an ended turn end its
	// streams with an error.
	closedRetries int
	// liveInterval is the time between two reads of a model call's
	// heartbeat details while it streams its answer.
	liveInterval time.Duration
}

// defaultHubSettings are the settings of a real server.
var defaultHubSettings = hubSettings{
	queryTimeout:    10 * time.Second,
	minBackoff:      50 * time.Millisecond,
	maxBackoff:      time.Second,
	notFoundTimeout: 2 * time.Minute,
	startingFor:     2 * time.Second,
	closedRetries:   3,
	liveInterval:    protocol.DefaultFlushInterval,
}

// hub runs at most one poller per turn in this API process, however many
// clients stream that turn. A poller wakes when the turn's workflow history
// moves, reads the new events once, keeps them in memory and tells every
// subscriber. The poller stops when the last subscriber leaves, and its
// events are forgotten then.
type hub struct {
	src      eventSource
	log      *slog.Logger
	metrics  *metrics
	settings hubSettings
	// ctx is the parent of every poller; it ends at shutdown.
	ctx context.Context

	mu    sync.Mutex
	feeds map[string]*feed
}

func newHub(ctx context.Context, src eventSource, log *slog.Logger, m *metrics, settings hubSettings) *hub {
	return &hub{src: src, log: log, metrics: m, settings: settings, ctx: ctx, feeds: map[string]*feed{}}
}

// feed is one turn's events as this API process knows them, and the
// subscribers that stream them.
type feed struct {
	turnID string
	// stop ends the feed's poller.
	stop context.CancelFunc

	mu sync.Mutex
	// events[i].Seq == i+1: the turn's log from its start, without gaps.
	events []protocol.Event
	// err ends the feed: nothing more will come.
	err  error
	subs map[*subscription]struct{}
	// queued, once set, is the notice that the turn waits in its
	// conversation's queue (protocol.EventQueued), for every subscriber
	// that joins before the turn's first event.
	queued *protocol.Event
	// settled is closed once the hub knows whether the turn is queued
	// (settleLocked): a stream holds its keep-alives until then, so that
	// the queued notice comes first.
	settled chan struct{}
}

// subscription is one client's place in a feed.
type subscription struct {
	feed *feed
	// cursor is the last sequence number this client has received.
	cursor int
	// notify gets a value (never blocking, coalesced) when the feed has
	// news for this client.
	notify chan struct{}
	// toldQueued is true once the client has had the feed's queued notice.
	toldQueued bool
}

// subscribe adds a subscriber to turnID's feed, starting its poller when
// nobody else watches the turn. The subscriber gets the events after after.
func (h *hub) subscribe(turnID string, after int) *subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[turnID]
	if f != nil && f.failed() {
		// A failed feed stays only for its subscribers to read the error; a
		// newcomer gets a fresh try.
		f = nil
	}
	if f == nil {
		ctx, stop := context.WithCancel(h.ctx)
		f = &feed{turnID: turnID, stop: stop, subs: map[*subscription]struct{}{}, settled: make(chan struct{})}
		h.feeds[turnID] = f
		h.metrics.pollersStarted.Inc()
		h.metrics.pollersRunning.Inc()
		go func() {
			defer h.metrics.pollersRunning.Dec()
			h.poll(ctx, f)
		}()
	}
	s := &subscription{feed: f, cursor: max(after, 0), notify: make(chan struct{}, 1)}
	f.mu.Lock()
	f.subs[s] = struct{}{}
	f.mu.Unlock()
	return s
}

// known reports whether turnID exists or is sure to, asking the source
// unless this process streams it already (it has events, or its
// conversation said it is queued). Where the source cannot tell (no worker
// answers the conversation's query), the turn counts as known: its stream
// then waits for it as before. Where Temporal itself cannot serve (it
// says so, or does not describe the turn in time, which needs no
// worker), the error says so: the stream is not opened on a guess.
func (h *hub) known(ctx context.Context, turnID string) (bool, error) {
	h.mu.Lock()
	f := h.feeds[turnID]
	h.mu.Unlock()
	if f != nil && f.seen() {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.settings.queryTimeout)
	defer cancel()
	ok, err := h.src.Exists(ctx, turnID)
	if err != nil {
		if isServerUnavailable(err) || (errors.Is(err, errNotDescribed) && isUnavailable(err)) {
			return false, err
		}
		h.log.Warn("cannot tell whether the turn exists; streaming it", "turnId", turnID, "error", err)
		return true, nil
	}
	return ok, nil
}

// unsubscribe removes s from its feed; the last one to leave stops the
// poller and drops the feed's events.
func (h *hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := s.feed
	f.mu.Lock()
	delete(f.subs, s)
	empty := len(f.subs) == 0
	f.mu.Unlock()
	if !empty {
		return
	}
	f.stop()
	if h.feeds[f.turnID] == f {
		delete(h.feeds, f.turnID)
	}
}

// next returns the events after the subscription's cursor and moves the
// cursor past them. done is true when nothing more will come: the feed holds
// the finish event, or it failed with err.
func (s *subscription) next() (events []protocol.Event, done bool, err error) {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.cursor < len(f.events) {
		events = slices.Clone(f.events[s.cursor:])
		s.cursor = len(f.events)
	}
	if f.finishedLocked() {
		return events, true, nil
	}
	return events, f.err != nil, f.err
}

// queuedNotice returns the feed's queued notice once, while the turn has
// no events yet and the client has not had it.
func (s *subscription) queuedNotice() (protocol.Event, bool) {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.toldQueued || f.queued == nil || len(f.events) > 0 || s.cursor > 0 {
		return protocol.Event{}, false
	}
	s.toldQueued = true
	return *f.queued, true
}

// told records what the turn's conversation said: the turn waits in its
// queue (notice, which the subscribers are told), or not, or it could not
// tell (nil).
func (f *feed) told(notice *protocol.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if notice != nil && f.queued == nil {
		f.queued = notice
		f.notifyLocked()
	}
	f.settleLocked()
}

// settle records that the hub knows whether the turn is queued: it exists,
// it has ended, or the hub cannot tell.
func (f *feed) settle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleLocked()
}

func (f *feed) settleLocked() {
	select {
	case <-f.settled:
	default:
		close(f.settled)
	}
}

// settled returns the channel that is closed once the hub knows whether
// the turn is queued; by then the feed holds the queued notice if it is.
func (s *subscription) settled() <-chan struct{} { return s.feed.settled }

// changed returns the channel that gets a value when the feed has news.
func (s *subscription) changed() <-chan struct{} { return s.notify }

// last returns the sequence number of the feed's newest event.
func (f *feed) last() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.events)
}

// seen reports whether the turn is known to exist or to be queued: it
// has events, or the queued notice.
func (f *feed) seen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.events) > 0 || f.queued != nil
}

func (f *feed) finishedLocked() bool { return contract.Finished(f.events) }

func (f *feed) finished() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.finishedLocked()
}

func (f *feed) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// add appends the events that continue the log and tells the subscribers.
// It reports false when evs skipped ahead of the log (a gap), so the caller
// reads again from the log's end.
func (f *feed) add(evs []protocol.Event) (contiguous bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.events)
	contiguous = true
	for _, e := range evs {
		if e.Seq <= len(f.events) {
			continue // already have it
		}
		if e.Seq != len(f.events)+1 {
			contiguous = false
			break
		}
		f.events = append(f.events, e)
	}
	if len(f.events) > n {
		f.notifyLocked()
	}
	return contiguous
}

// fail ends the feed with err and tells the subscribers.
func (f *feed) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
	f.notifyLocked()
	f.settleLocked()
}

func (f *feed) notifyLocked() {
	for s := range f.subs {
		select {
		case s.notify <- struct{}{}:
		default: // already has news pending
		}
	}
}

// poll keeps f current until the turn finishes, fails, or ctx ends: it
// reads the turn's events each time the watcher says they may have moved,
// or a failed read's backoff is over, and takes what the read answered.
func (h *hub) poll(ctx context.Context, f *feed) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := h.startPoller(ctx, f)
	defer p.stop()
	for p.wait(ctx) {
		ended, after := p.closed(), f.last()
		resp, err := p.read(ctx, after, ended)
		if err == nil || ended || !isNotFound(err) {
			// The turn exists, has ended, or cannot be read: it waits in
			// no queue, or the hub cannot tell. Only a turn that does not
			// exist yet waits for its conversation's answer (watch).
			f.settle()
		}
		var done bool
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			done = p.failed(err, after, ended)
		default:
			done = p.take(ctx, resp, after, ended)
		}
		if done {
			return
		}
	}
}

// poller is the state of one feed's poll, which its steps share.
type poller struct {
	h   *hub
	f   *feed
	log *slog.Logger
	// wake coalesces the watcher's news: however many history events arrive
	// during one read, they cause one more read.
	wake chan struct{}
	// closedCtx ends when the watcher sees the workflow close (or the
	// poll's ctx ends, which returns first): a query in flight then (which,
	// without a worker, would only time out) gives way to a read of the
	// final log.
	closedCtx  context.Context
	markClosed context.CancelFunc
	// watchFailed gets the watcher's error when it gives up.
	watchFailed chan error
	// retry fires when a failed read is to be tried again, backoff after
	// the next failure; closedFailures counts the failed reads of the
	// ended turn.
	retry          <-chan time.Time
	backoff        time.Duration
	closedFailures int
	live           liveReader
}

// startPoller starts the watcher of f's turn, with a first read due at
// once: the turn may have events already.
func (h *hub) startPoller(ctx context.Context, f *feed) *poller {
	p := &poller{h: h, f: f, log: h.log.With("turnId", f.turnID), wake: make(chan struct{}, 1),
		watchFailed: make(chan error, 1), backoff: h.settings.minBackoff}
	p.changed()
	p.closedCtx, p.markClosed = context.WithCancel(ctx)
	go p.watch(ctx)
	return p
}

// watch runs the hub's watcher of the turn until the workflow closes, ctx
// ends or the watcher gives up.
func (p *poller) watch(ctx context.Context) {
	if err := p.h.watch(ctx, p.f.turnID, p.onClose, p.changed, p.f.told, p.log); err != nil {
		p.watchFailed <- err
	}
}

// changed asks for one more read (wake).
func (p *poller) changed() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// onClose marks the workflow closed and asks for the read of its final log.
func (p *poller) onClose() {
	p.markClosed()
	p.changed()
}

// closed reports whether the watcher has seen the workflow close.
func (p *poller) closed() bool { return p.closedCtx.Err() != nil }

// stop stops the reader of a streaming model call and ends closedCtx.
func (p *poller) stop() {
	p.live.stop()
	p.markClosed()
}

// wait waits for a reason to read: the watcher's news or a retry. It
// reports false when the poll ends instead: ctx ended, or the watcher gave
// up, which fails the feed.
func (p *poller) wait(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case err := <-p.watchFailed:
		p.f.fail(err)
		return false
	case <-p.wake:
	case <-p.retry:
	}
	p.retry = nil
	return true
}

// read reads the turn's events after after, within queryTimeout. ended
// says the watcher has seen the workflow close; until then, the read gives
// way when it does (closedCtx).
func (p *poller) read(ctx context.Context, after int, ended bool) (contract.EventsResponse, error) {
	readCtx := p.closedCtx
	if ended {
		readCtx = ctx
	}
	qctx, cancel := context.WithTimeout(readCtx, p.h.settings.queryTimeout)
	resp, err := p.h.src.Events(qctx, p.f.turnID, after, ended)
	cancel()
	p.h.metrics.eventQueries.Inc()
	return resp, err
}

// failed takes a read that failed with err. It reports true when that
// fails the feed; otherwise the poll reads again when the watcher wakes it
// or, for an error that may pass, once the backoff is over.
func (p *poller) failed(err error, after int, ended bool) (done bool) {
	var lost *turnLostError
	switch {
	case !ended && p.closed():
		// The workflow closed during the read; the watcher has woken us
		// to read the final log.
		return false
	case !ended && (isNotFound(err) || isNotReady(err)):
		// The turn has not started (or not run its first task) yet; the
		// watcher wakes us when it has.
		p.log.Debug("turn not started yet", "error", err)
		return false
	case !ended && isQueryFailed(err):
		p.f.fail(fmt.Errorf("%s cannot be streamed as a turn: %w", p.f.turnID, err))
		return true
	case errors.As(err, &lost):
		p.f.fail(err)
		return true
	}
	if ended {
		if p.closedFailures++; p.closedFailures >= p.h.settings.closedRetries {
			p.f.fail(fmt.Errorf("read the events of ended turn %s: %w", p.f.turnID, err))
			return true
		}
	}
	p.log.Warn("read turn events", "after", after, "error", err, "retryIn", p.backoff)
	p.retry = time.After(p.backoff)
	p.backoff = min(2*p.backoff, p.h.settings.maxBackoff)
	return false
}

// take adds the events a read answered to the feed and follows the model
// call that streams its answer. It reports true when the feed is complete:
// the turn finished, or ended without a finish event, which fails the feed.
func (p *poller) take(ctx context.Context, resp contract.EventsResponse, after int, ended bool) (done bool) {
	p.backoff = p.h.settings.minBackoff
	contiguous := p.f.add(resp.Events)
	p.live.follow(ctx, resp.Live, contiguous && resp.Live != nil && resp.Live.After <= p.f.last(), p.readLive)
	switch {
	case p.f.finished():
		return true
	case !contiguous:
		p.log.Warn("turn events skipped ahead; reading again", "after", after)
		p.changed()
	case ended:
		p.f.fail(fmt.Errorf("turn %s ended without a finish event", p.f.turnID))
		return true
	}
	return false
}

// readLive reads the token events of the model call l names (hub.readLive).
func (p *poller) readLive(ctx context.Context, l contract.LiveTokens) {
	p.h.readLive(ctx, p.f, l, p.log)
}

// turnLostError is why a turn ended that could not read its history: the
// worker terminated it because a payload its history names is not in the
// payload store (workflows.LostPayloads). Its events cannot be read either,
// so its streams end with this at once.
type turnLostError struct {
	turnID, why string
}

func (e *turnLostError) Error() string { return "turn " + e.turnID + " ended: " + e.why }

// lostTurn returns the turnLostError of workflow wid when err, what reading
// its result gave, says it was terminated for a lost payload; nil otherwise.
func lostTurn(ctx context.Context, c client.Client, wid string, err error) *turnLostError {
	var terminated *temporal.TerminatedError
	if !errors.As(err, &terminated) {
		return nil
	}
	return closedLost(ctx, c, wid)
}

// closedLost returns the turnLostError of workflow wid when it has closed,
// terminated for a lost payload; nil otherwise (running, closed otherwise,
// or not found). It reads the close event only of a run that was
// terminated: Temporal answers a read of a running workflow's close event
// when the workflow closes, or with nothing just before the read's
// deadline (some 9 s on), so a decision with a forged or stale request id
// would wait that long to be refused.
func closedLost(ctx context.Context, c client.Client, wid string) *turnLostError {
	d, err := c.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		return nil
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		return nil
	}
	it := c.GetWorkflowHistory(ctx, wid, info.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil
		}
		if why, ok := contract.LostPayload(ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason()); ok {
			return &turnLostError{turnID: wid, why: why}
		}
	}
	return nil
}

// liveReader is the poller's reader of a streaming model call's details: at
// most one runs, for the call the turn's last read named.
type liveReader struct {
	activityID string
	cancel     context.CancelFunc
}

// follow starts reading the call l names when it is not read yet and may
// be (ok: the feed holds the events the call's pieces follow), and stops
// reading a call the turn no longer names.
func (r *liveReader) follow(ctx context.Context, l *contract.LiveTokens, ok bool, read func(context.Context, contract.LiveTokens)) {
	switch {
	case l != nil && l.ActivityID == r.activityID:
		return // being read, or given up on
	case l != nil && !ok:
		return
	}
	r.stop()
	if l == nil {
		return
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.activityID = l.ActivityID
	go read(ctx, *l)
}

func (r *liveReader) stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.activityID, r.cancel = "", nil
}

// liveFailures is how many failed reads in a row of a model call's details
// end reading them; the turn logs the same token events when the call ends.
const liveFailures = 3

// readLive adds the token events of a model call that streams by heartbeat
// to f while the call runs, reading its details every liveInterval. The
// first read comes a third of an interval after the call's first details
// can be there (the model activity records none in its first interval): a
// call that ends sooner, as one that only asks for tools often does, costs
// no read, since the poller stops this when the turn no longer names the
// call. Their numbers follow live.After; the turn logs the same events
// under the same numbers when the call ends, so the poller's next read
// finds them had. Heartbeats are no history events, so the watcher does not
// wake for them.
func (h *hub) readLive(ctx context.Context, f *feed, live contract.LiveTokens, log *slog.Logger) {
	wait := time.NewTimer(h.settings.liveInterval + h.settings.liveInterval/3)
	defer wait.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		wait.Reset(h.settings.liveInterval)
		pieces, running, err := h.src.Live(ctx, f.turnID, live.ActivityID)
		h.metrics.liveReads.Inc()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if failures++; failures >= liveFailures {
				log.Warn("read the answer of a running model call; the rest comes when it ends", "activityId", live.ActivityID, "error", err)
				return
			}
		default:
			failures = 0
			evs := make([]protocol.Event, len(pieces))
			for i, p := range pieces {
				evs[i] = protocol.Event{Seq: live.After + 1 + i, Type: protocol.EventToken, Data: p.Data, Reset: p.Reset}
			}
			f.add(evs)
			if !running {
				return
			}
		}
	}
}

// watch runs the source's watcher until the turn's workflow closes, then
// calls onClose. It tries again after failures, and gives up with
// errTurnNotFound when the turn does not exist for notFoundTimeout. A turn
// that does not exist because its message waits in its conversation's
// queue is no failure, however long it waits: watch calls queued with the
// notice, waits (a long poll of its history, at no cost) for the turn that
// runs to end, and looks again. When the conversation says the turn is not
// queued, or does not say, watch calls queued with nil.
func (h *hub) watch(ctx context.Context, turnID string, onClose, changed func(), queued func(*protocol.Event), log *slog.Logger) error {
	backoff := h.settings.minBackoff
	var missingSince, nextAsk time.Time
	for {
		var seen atomic.Bool
		err := h.src.Watch(ctx, turnID, func() {
			seen.Store(true)
			changed()
		})
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			onClose()
			return nil
		}
		if seen.Load() {
			backoff, missingSince = h.settings.minBackoff, time.Time{}
		}
		if isNotFound(err) && !time.Now().Before(nextAsk) {
			behind, conv, ok := h.queuedBehind(ctx, turnID, log)
			if ok {
				queued(&protocol.Event{Type: protocol.EventQueued, ConversationID: conv, TurnID: turnID})
				missingSince, backoff = time.Time{}, h.settings.minBackoff
				if err := h.src.Watch(ctx, behind, func() {}); err != nil && ctx.Err() == nil {
					log.Debug("watch the turn this one waits for", "running", behind, "error", err)
				}
			} else {
				// Not queued (about to start, or not a turn its
				// conversation knows), or the conversation did not say:
				// asked again after a while.
				queued(nil)
				nextAsk = time.Now().Add(h.settings.startingFor)
			}
			if ctx.Err() != nil {
				return nil
			}
			if ok {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(h.settings.minBackoff):
				}
				continue
			}
		}
		if isNotFound(err) {
			if missingSince.IsZero() {
				missingSince = time.Now()
			}
			if time.Since(missingSince) >= h.settings.notFoundTimeout {
				return fmt.Errorf("turn %s did not start within %s: %w", turnID, h.settings.notFoundTimeout, errTurnNotFound)
			}
		} else {
			missingSince = time.Time{}
		}
		var wait time.Duration
		wait, backoff = h.settings.retryWait(backoff, missingSince, time.Now())
		if missingSince.IsZero() {
			log.Warn("watch turn history", "error", err, "retryIn", wait)
		} else {
			log.Debug("turn does not exist yet", "retryIn", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// queuedBehind asks the conversation of turnID whether the turn waits in
// its queue behind a running turn, and returns that turn and the
// conversation. It reports false when the turn is not queued, or queued
// with no turn running (the conversation starts it next, in moments), when
// turnID is not a turn's, or when the conversation did not answer.
func (h *hub) queuedBehind(ctx context.Context, turnID string, log *slog.Logger) (running, conv string, queued bool) {
	conv, n, ok := contract.ParseTurnWorkflowID(turnID)
	if !ok {
		return "", "", false
	}
	qctx, cancel := context.WithTimeout(ctx, h.settings.queryTimeout)
	defer cancel()
	st, err := h.src.Conversation(qctx, conv)
	if err != nil {
		log.Debug("ask the conversation whether the turn is queued", "conversationId", conv, "error", err)
		return "", conv, false
	}
	// The queue holds the conversation's newest messages, in order.
	if n <= st.Turns-st.Queued || n > st.Turns || st.Running == "" {
		return "", conv, false
	}
	return st.Running, conv, true
}

// retryWait is how long the watcher waits before it tries again, and the
// backoff after that: the backoff, doubling up to maxBackoff, but only
// minBackoff while a turn that has not existed since missingSince (zero
// when it exists) may be starting.
func (s hubSettings) retryWait(backoff time.Duration, missingSince, now time.Time) (wait, next time.Duration) {
	if !missingSince.IsZero() && now.Sub(missingSince) < s.startingFor {
		return s.minBackoff, s.minBackoff
	}
	return backoff, min(2*backoff, s.maxBackoff)
}

// temporalSource reads turns from Temporal: the events query while a turn
// runs, its result once it has closed, and its history's long poll to learn
// when to read again.
type temporalSource struct {
	client client.Client
	log    *slog.Logger
	// codec resolves the payload store's references; nil without a store.
	codec converter.PayloadCodec
}

// Events reads a turn's events after after. An ended turn is read from its
// result first: that needs no worker and no replay. Its query is the
// fallback, for a turn that failed or was terminated and so has no result.
func (s temporalSource) Events(ctx context.Context, turnID string, after int, closed bool) (contract.EventsResponse, error) {
	if closed {
		var out contract.TurnOutput
		err := s.client.GetWorkflow(ctx, turnID, "").Get(ctx, &out)
		if err == nil {
			return contract.EventsAfter(out.Events, after), nil
		}
		if ctx.Err() != nil {
			// No answer in time is not "no result": a query now would start
			// with no time left.
			return contract.EventsResponse{}, fmt.Errorf("result of ended turn %s: %w", turnID, err)
		}
		if lost := lostTurn(ctx, s.client, turnID, err); lost != nil {
			return contract.EventsResponse{}, lost // its query would need the payload too
		}
		s.log.Debug("ended turn has no result; querying its events", "turnId", turnID, "error", err)
	}
	v, err := s.client.QueryWorkflow(ctx, turnID, "", contract.EventsQuery, contract.EventsRequest{After: after})
	if err != nil {
		// A turn the worker ended for a lost payload fails its query the
		// same way, and may be read before the watcher has seen it close.
		if isQueryFailed(err) {
			if lost := closedLost(ctx, s.client, turnID); lost != nil {
				return contract.EventsResponse{}, lost
			}
		}
		return contract.EventsResponse{}, fmt.Errorf("query %s of turn %s after %d: %w", contract.EventsQuery, turnID, after, err)
	}
	var resp contract.EventsResponse
	if err := v.Get(&resp); err != nil {
		return contract.EventsResponse{}, fmt.Errorf("decode %s of turn %s: %w", contract.EventsQuery, turnID, err)
	}
	return resp, nil
}

// Exists asks Temporal for the turn's workflow and, when there is none
// (yet), its conversation for how many turns it has given out.
func (s temporalSource) Exists(ctx context.Context, turnID string) (bool, error) {
	_, err := s.client.DescribeWorkflow(ctx, turnID, "")
	if err != nil && !isNotFound(err) {
		return false, fmt.Errorf("%w %s: %w", errNotDescribed, turnID, err)
	}
	if err == nil {
		return true, nil
	}
	conv, n, ok := contract.ParseTurnWorkflowID(turnID)
	if !ok {
		// No turn's id (a subagent's, say): its stream says what it is.
		return true, nil
	}
	state, err := s.Conversation(ctx, conv)
	switch {
	case isNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return n <= state.Turns, nil
}

// errNotDescribed marks an error of Exists that came from Temporal's
// description of the workflow, which no worker takes part in.
var errNotDescribed = errors.New("no description from Temporal of turn")

// Conversation queries a conversation's state.
func (s temporalSource) Conversation(ctx context.Context, conversationID string) (contract.ConversationState, error) {
	var st contract.ConversationState
	v, err := s.client.QueryWorkflow(ctx, contract.ConversationWorkflowID(conversationID), "", contract.StateQuery)
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		return st, fmt.Errorf("query %s of conversation %s: %w", contract.StateQuery, conversationID, err)
	}
	return st, nil
}

// Live reads the heartbeat details of the turn's model call activityID from
// the workflow's description: no worker and no history read.
func (s temporalSource) Live(ctx context.Context, turnID, activityID string) ([]protocol.TokenPiece, bool, error) {
	d, err := s.client.DescribeWorkflow(ctx, turnID, "")
	if err != nil {
		return nil, false, fmt.Errorf("describe turn %s: %w", turnID, err)
	}
	for _, a := range d.RawResponse.GetPendingActivities() {
		if a.GetActivityId() != activityID {
			continue
		}
		var p protocol.TokenProgress
		if hb := a.GetHeartbeatDetails(); len(hb.GetPayloads()) > 0 {
			if err := s.converter().FromPayloads(hb, &p); err != nil {
				return nil, true, fmt.Errorf("decode the answer of model call %s of turn %s: %w", activityID, turnID, err)
			}
		}
		return p.Pieces, true, nil
	}
	return nil, false, nil
}

// converter decodes payloads as the worker encoded them: through the payload
// store's codec when there is one, since a long answer's details are stored.
func (s temporalSource) converter() converter.DataConverter {
	if s.codec == nil {
		return converter.GetDefaultDataConverter()
	}
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), s.codec)
}

// Watch long-polls the turn's history and calls changed after each
// completed workflow task (the only moment its state, and so its event log,
// can change) and when the workflow closes. The history iterator ends when
// the workflow has closed.
func (s temporalSource) Watch(ctx context.Context, turnID string, changed func()) error {
	it := s.client.GetWorkflowHistory(ctx, turnID, "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return fmt.Errorf("history of turn %s: %w", turnID, err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			changed()
		}
	}
	return nil
}
