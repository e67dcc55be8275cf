package workflows

import (
	"slices"

	"go.temporal.io/sdk/workflow"
)

// Patches: the change ids of workflow.GetVersion, one constant each, with
// the release that added it. A change to the commands a workflow issues
// goes behind a new one; docs/versioning.md says when, and when one may be
// retired (retired lists those whose old branch is gone). The replay
// corpus (testdata/replay) holds histories of every release, so a missing
// patch fails make test.
const (
	// patchPolicyRecorded (v0.2.0, retired): a batch's policy checks are
	// recorded in a SideEffect instead of evaluated on every replay
	// (turn.vetBatch records them with the vetting since normalized-calls,
	// so nothing asks for it now).
	patchPolicyRecorded = "policy-recorded"
	// patchStrictGate (v0.3.0, retired): a bypassed turn still asks where a
	// rule requires a tool always, and client tools follow the policy
	// (turn.strictGate).
	patchStrictGate = "strict-gate"
	// patchNormalizedCalls (v0.3.0, retired): a batch's arguments are
	// normalized before the policy reads them, and refused ones never run
	// (turn.vetBatch).
	patchNormalizedCalls = "normalized-calls"
	// patchContextCompaction (v0.3.0, retired): a turn whose view of the
	// conversation passes the context budget compacts it, and a model that
	// says it is too long gets one compacted retry (turn.modelView).
	patchContextCompaction = "context-compaction"
	// patchHistoryLimit (v0.4.0, retired): a turn whose history the server
	// says should continue as new ends with an error event before the
	// history limit terminates it (turn.outgrewHistory).
	patchHistoryLimit = "history-limit"
	// patchApprovalPreview (v0.4.0, retired): a batch's calls that may ask
	// get a preview, read on the worker, before their requests
	// (turn.previews).
	patchApprovalPreview = "approval-preview"
	// patchPlainNotRun (v0.4.0, retired): the tool result of a call that did
	// not run says so plainly, why, and that it is not to be retried
	// unasked (turn.notRun). Metadata-free text, but the model reads it
	// and tool_result events show it, so a replay must keep the old words.
	patchPlainNotRun = "plain-not-run"
	// patchAuditLedger (v0.4.0, retired): a worker with an audit ledger
	// writes a row for every call the gate asks about or a grant answers,
	// in local activities (turn.auditing).
	patchAuditLedger = "audit-ledger"
	// patchTokensByHeartbeat (v0.4.0, retired): a turn's model call streams
	// its answer in the activity's heartbeat details, not in signals that
	// cost a workflow task each, and the turn logs the call's token events
	// when it ends (turn.callModel).
	patchTokensByHeartbeat = "tokens-by-heartbeat"
	// patchLedgerBehind (after level 2, in level 3): a ledger that does not answer
	// costs a batch one short wait, not two minutes per write: the rows a
	// failed write leaves go with the next write, and the loop writes
	// what is left, with the long wait, before it ends (turn.writeAudit).
	patchLedgerBehind = "ledger-behind"
	// patchGrantNarrowed (after level 2, in level 3): a grant answers only a call that
	// its maker may decide under the rule in force when the call comes
	// (deciders, second person), and a grant for the same arguments
	// compares their numbers as written, not as float64
	// (turn.grantsFor).
	patchGrantNarrowed = "grant-narrowed"
	// patchIdempotentMessages (after level 2, in level 3): a message with the
	// idempotency key of one the conversation took is answered with that
	// message's turn and queues none (conversation.onMessage). Asked only
	// when such a message comes: a worker of an earlier build, behind an
	// API that sends keys, queued a second turn for it.
	patchIdempotentMessages = "idempotent-messages"
	// patchConversationCompaction (after level 2, in level 3): the conversation
	// keeps the summary a turn makes and carries it to its later turns
	// (and across continue-as-new), which bring it up to date only when
	// what came after it passes the budget again, in requests that each
	// fit the model's window; the newest whole turns are never summarized,
	// and a refusal for length gets smaller requests until one fits
	// (turn.compactedView, turn.refit). Before it a turn summarized within
	// itself, and its summary was lost (turn.modelViewInTurn). Asked by a
	// turn when it first needs to compact, and by a conversation when a
	// person asks it to compact.
	patchConversationCompaction = "conversation-compaction"
)

// PatchLevel is the patch level this build records in the settings of
// every workflow it begins (Settings.PatchLevel, in the settings
// SideEffect a turn and a conversation record at their start). A workflow
// that recorded level 1 or more takes the patches of its level and of the
// levels below (levels) without asking GetVersion, and runs its previews as
// local activities (turn.previews).
// Asked one by one, the patches of level 1 cost every turn four markers
// and four upserts of the TemporalChangeVersion search attribute, each a
// visibility write on the server: most of the history a turn added to
// plain Temporal's. A workflow that recorded no level (begun before
// levels) asks each patch as it did. A patch added after a level is asked
// with GetVersion until a release raises the level to include it
// (docs/versioning.md).
//
// Level 2 takes the patches of level 1 and changes one thing of its own: a
// message that an idle conversation runs at once is answered when its
// turn's workflow has started (conversation.onMessage), not in the task
// that takes it.
//
// Level 3 takes the patches of level 2 and those added after it
// (ledger-behind to conversation-compaction), and changes four things of
// its own: no write of the audit ledger sits between a decision and its
// tool, or between a tool and its result (turn.owe), a batch's requests
// wait on one timer (gate.expireTogether), one local activity previews a
// batch (turn.previews), and one SideEffect makes a batch's request ids
// (gate.batchRequestID). Asked one by one, the
// patches after level 2 cost a turn a marker and an upsert each.
//
// Level 4 takes level 3's patches and changes one thing of its own: a
// batch of file tools upserts its search attributes when its results are
// published, not in the task that starts its tools (levelStatusOffPath).
//
// Level 5 takes level 4's and changes one thing of its own: a file tool's
// input carries no ledger rows; the model call after it carries them
// (levelFileToolsCarryNone).
const PatchLevel = 5

// The changes that a level makes without a patch id of its own: a
// workflow that recorded the level (or a higher one) takes them.
const (
	// levelLocalPreviews: previews run as local activities (turn.previews).
	// Its level-0 branch, the preview activity, stays while turns of
	// v0.4.0, the latest release, may wait (docs/versioning.md).
	levelLocalPreviews = 1
	// levelAnswerOnStart: a message an idle conversation runs at once is
	// answered when its turn's workflow has started (conversation.onMessage).
	levelAnswerOnStart = 2
	// levelLedgerOffPath: the rows of a batch's last decision and of its
	// outcomes go to the ledger with the next activity the turn runs,
	// which writes them while it works, instead of a local activity that
	// the tool, or the tool's result, waits for (turn.owe).
	levelLedgerOffPath = 3
	// levelOneTimer: a batch's requests wait on one durable timer, to the
	// soonest expiry of those still waiting, not one timer each
	// (gate.expireTogether).
	levelOneTimer = 3
	// levelOnePreview: one local activity previews every call of a batch
	// that may ask (turn.previews), not one a call.
	levelOnePreview = 3
	// levelBatchIDs: the request ids of a batch are made in one SideEffect
	// (gate.batchRequestID), not one a request.
	levelBatchIDs = 3
	// levelStatusOffPath: a batch of file tools (turn.quickBatch) upserts
	// its search attributes when its results are published, not in the
	// workflow task that takes its last decision and starts its tools
	// (gate.waitEnded).
	levelStatusOffPath = 4
	// levelFileToolsCarryNone: a file tool's input (Read, Write, Edit)
	// carries no ledger rows (turn.runTool); the model call after it
	// carries them, and waits for them. Their write beside a tool done in
	// a millisecond nearly always outlasted it, went on while the turn
	// published its result and the API read it, and was made again by the
	// model call (issue 28; bench/RESULTS.md, the notes of 2026-12-06 08:33).
	levelFileToolsCarryNone = 5
)

// levels are the patches each level takes without asking: a workflow of
// level n takes those of levels 1 to n.
var levels = map[int][]string{
	1: {patchPolicyRecorded, patchStrictGate, patchNormalizedCalls, patchContextCompaction, patchHistoryLimit,
		patchApprovalPreview, patchPlainNotRun, patchAuditLedger, patchTokensByHeartbeat},
	3: {patchLedgerBehind, patchGrantNarrowed, patchIdempotentMessages, patchConversationCompaction},
}

// afterLevel are the patches added after PatchLevel's: a workflow that
// records today's level still asks each with GetVersion (a marker the
// first time), until a release raises the level to include them.
var afterLevel = []string{}

// PatchesAfterLevel returns the patches that a workflow of today's level
// still asks with GetVersion: the only version markers its history may
// hold (the replay and upgrade tests check it).
func PatchesAfterLevel() []string { return slices.Clone(afterLevel) }

// retired are the patches whose old branch is gone: no workflow that can
// still run takes it (docs/versioning.md, Retiring a patch). Every turn
// and subagent begun on v0.4.0 took each of them, and those begun before
// had to end before a deployment took this build (CHANGELOG.md). Their
// ids stay: a change id is never reused.
var retired = []string{patchPolicyRecorded, patchStrictGate, patchNormalizedCalls, patchContextCompaction, patchHistoryLimit,
	patchApprovalPreview, patchPlainNotRun, patchAuditLedger, patchTokensByHeartbeat}

// patched reports whether a workflow that runs with settings s takes the
// patch id: at once where the level it recorded includes id, otherwise as
// workflow.GetVersion answers (a marker the first time it is asked). A
// retired patch answers true: GetVersion's minimum is the patch's version,
// so a workflow whose history was made without it fails its workflow task
// there, naming the patch, instead of running code it never ran.
func patched(ctx workflow.Context, s Settings, id string) bool {
	for level, ids := range levels {
		if s.PatchLevel >= level && slices.Contains(ids, id) {
			return true
		}
	}
	oldest := workflow.DefaultVersion
	if slices.Contains(retired, id) {
		oldest = 1
	}
	return workflow.GetVersion(ctx, id, oldest, 1) != workflow.DefaultVersion
}

// requirePatched asks for the retired patch id where its old branch was
// (patched): a workflow of a level that holds it asks nothing, one of
// level 0 finds the marker its history holds, so the markers it replays
// are where they were.
func requirePatched(ctx workflow.Context, s Settings, id string) {
	if !slices.Contains(retired, id) {
		panic("requirePatched: patch " + id + " is not retired: branch on patched")
	}
	patched(ctx, s, id)
}
