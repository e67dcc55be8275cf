package contract

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/protocol"
)

// The control workflow: the gate's admin state (a freeze, the stand-ins),
// one workflow per namespace, which the API starts with its first change.
const (
	// ControlWorkflow holds the gate's admin state (ControlState) and
	// changes it by Update; it continues as new when its history grows.
	ControlWorkflow = "Control"
	// ControlWorkflowID is the one control workflow's ID.
	ControlWorkflowID = "tollgate-control"
	// ControlQuery returns the ControlState.
	ControlQuery = "control"
	// FreezeUpdate freezes the gate (FreezeInput in, ControlState out).
	FreezeUpdate = "freeze"
	// ThawUpdate thaws it (ThawInput in, ControlState out).
	ThawUpdate = "thaw"
	// DelegateUpdate adds a stand-in (DelegateInput in, ControlState
	// out).
	DelegateUpdate = "delegate"
	// UndelegateUpdate removes one (UndelegateInput in, ControlState
	// out).
	UndelegateUpdate = "undelegate"
)

// ControlState is the gate's admin state as the control workflow keeps it.
type ControlState struct {
	Freeze protocol.GateFreeze `json:"freeze"`
	// Delegations are those not yet over, in the order they were set.
	Delegations []protocol.Delegation `json:"delegations,omitempty"`
	// Changes counts every change the workflow took, over all its runs:
	// the ledger's row of a change is named by it and Epoch
	// (control:<epoch>:<n>).
	Changes int `json:"changes,omitempty"`
	// Epoch is the run ID of the control workflow's first run, which its
	// later runs carry: a control workflow started again (after one was
	// terminated) counts its changes from 0 again.
	Epoch string `json:"epoch,omitempty"`
}

// StandInFor is the principal that principal stands in for at now, or ""
// when none: the control workflow refuses a delegation that would make
// anyone stand in for two at once.
func (s *ControlState) StandInFor(principal string, now time.Time) string {
	if s == nil || principal == "" {
		return ""
	}
	for _, d := range s.Delegations {
		if d.To == principal && d.Active(now) {
			return d.From
		}
	}
	return ""
}

// ControlInput starts the control workflow: the state a run before it
// left (empty for the first), and, for tests, after how many changes a run
// continues as new (0: the default).
type ControlInput struct {
	State         ControlState `json:"state"`
	ChangesPerRun int          `json:"changesPerRun,omitempty"`
}

// FreezeInput is the freeze Update's: By is the admin who freezes.
type FreezeInput struct {
	By string `json:"by"`
	protocol.FreezeRequest
}

// ThawInput is the thaw Update's.
type ThawInput struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// DelegateInput is the delegate Update's.
type DelegateInput struct {
	By string `json:"by"`
	protocol.DelegationRequest
}

// UndelegateInput is the undelegate Update's: ID names the delegation.
type UndelegateInput struct {
	By string `json:"by"`
	ID string `json:"id"`
}

// ControlPollInterval is how often a ControlWatcher reads the control
// workflow: a freeze reaches every worker and API within about this long.
const ControlPollInterval = time.Second

// controlQueryTimeout bounds one read of the control workflow.
const controlQueryTimeout = 5 * time.Second

// ControlWatcher keeps the newest ControlState it read from the control
// workflow: the worker's turns read the freeze from it, the API its
// stand-ins and its streams its changes. Its zero state (no control
// workflow) is not frozen, without stand-ins; before its first read it
// is not frozen either, unless made by NewFrozenControlWatcher.
type ControlWatcher struct {
	state atomic.Pointer[ControlState]
	mu    sync.Mutex
	// changed is closed, and replaced, when the freeze changes.
	changed chan struct{}
	// unread is what Frozen says before the first read.
	unread bool
}

// NewControlWatcher makes a watcher that has read nothing yet.
func NewControlWatcher() *ControlWatcher {
	return &ControlWatcher{changed: make(chan struct{})}
}

// NewFrozenControlWatcher makes a watcher whose Frozen is true until its
// first read: a worker that starts (or restarts) while the gate is
// frozen must not let a grant, sandbox: auto or bypassApproval answer a
// call before it has read the freeze. A control workflow that was never
// started reads as not frozen.
func NewFrozenControlWatcher() *ControlWatcher {
	w := NewControlWatcher()
	w.unread = true
	return w
}

// State is the newest state read, or nil before any.
func (w *ControlWatcher) State() *ControlState {
	if w == nil {
		return nil
	}
	return w.state.Load()
}

// Frozen reports whether the newest state read says the gate is frozen.
func (w *ControlWatcher) Frozen() bool {
	s := w.State()
	if s == nil {
		return w != nil && w.unread
	}
	return s.Freeze.Frozen
}

// Changed is closed when the freeze changes after it is called.
func (w *ControlWatcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Set makes s the newest state: the poll's, or an Update's answer. A
// state of the same epoch with fewer changes than the one held is older
// (a poll that was under way as an Update took its change) and is
// dropped.
func (w *ControlWatcher) Set(s ControlState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.state.Load()
	if old != nil && s.Epoch == old.Epoch && s.Changes < old.Changes {
		return
	}
	w.state.Store(&s)
	if old == nil && !s.Freeze.Frozen || old != nil && sameFreeze(old.Freeze, s.Freeze) {
		return
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// sameFreeze reports whether a and b say the same freeze.
func sameFreeze(a, b protocol.GateFreeze) bool {
	return a.Frozen == b.Frozen && a.BlockNewTurns == b.BlockNewTurns && a.By == b.By && a.Reason == b.Reason && a.At.Equal(b.At)
}

// ReadControl reads the control workflow's state once: the zero state when it
// was never started.
func ReadControl(ctx context.Context, c client.Client) (ControlState, error) {
	ctx, cancel := context.WithTimeout(ctx, controlQueryTimeout)
	defer cancel()
	v, err := c.QueryWorkflow(ctx, ControlWorkflowID, "", ControlQuery)
	var missing *serviceerror.NotFound
	if errors.As(err, &missing) {
		return ControlState{}, nil
	}
	if err != nil {
		return ControlState{}, fmt.Errorf("query %s of workflow %s: %w", ControlQuery, ControlWorkflowID, err)
	}
	var s ControlState
	if err := v.Get(&s); err != nil {
		return ControlState{}, fmt.Errorf("decode the state of workflow %s: %w", ControlWorkflowID, err)
	}
	return s, nil
}

// Watch reads the control workflow every ControlPollInterval until ctx
// ends, keeping what it read; a read that fails keeps the last state and
// is passed to onError (when not nil). Call Poll first to have a state
// before Watch runs.
func (w *ControlWatcher) Watch(ctx context.Context, c client.Client, onError func(error)) {
	t := time.NewTicker(ControlPollInterval)
	defer t.Stop()
	for {
		if err := w.Poll(ctx, c); err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads the control workflow once and keeps what it read.
func (w *ControlWatcher) Poll(ctx context.Context, c client.Client) error {
	s, err := ReadControl(ctx, c)
	if err != nil {
		return err
	}
	w.Set(s)
	return nil
}

// Summary is s in Markdown, for the Web UI's workflow page.
func (s ControlState) Summary() string {
	var b strings.Builder
	if s.Freeze.Frozen {
		fmt.Fprintf(&b, "**Frozen** by %s at %s", s.Freeze.By, s.Freeze.At.UTC().Format(time.RFC3339))
		if s.Freeze.Reason != "" {
			fmt.Fprintf(&b, ": %s", s.Freeze.Reason)
		}
		if s.Freeze.BlockNewTurns {
			b.WriteString(" (new turns refused)")
		}
		b.WriteString("\n\n")
	} else {
		b.WriteString("Not frozen\n\n")
	}
	if len(s.Delegations) > 0 {
		b.WriteString("**Stand-ins**\n\n")
	}
	for _, d := range s.Delegations {
		fmt.Fprintf(&b, "- `%s`: %s for %s, %s to %s, set by %s\n", d.ID, d.To, d.From,
			d.Since.UTC().Format(time.RFC3339), d.Until.UTC().Format(time.RFC3339), d.By)
	}
	return b.String()
}
