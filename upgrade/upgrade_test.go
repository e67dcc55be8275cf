// Package upgrade_test carries turns paused by earlier releases of
// tollgate across a deployment of today's build: each release is built from
// the repository's own history, and both builds run as processes on one
// real dev server.
package upgrade_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// unreleasedCorpus is the replay corpus of today's unreleased paths.
const unreleasedCorpus = "unreleased"

// wait bounds each wait for a turn or a process to reach a state.
const wait = 60 * time.Second

// TestTurnsPausedByEarlierReleasesFinishOnTodaysBuild carries a paused turn
// of every release whose replay corpus holds turns (workflows/testdata/replay:
// the releases whose paused turns today's build must carry on; v0.4.0 is
// the oldest) to its end on today's build. A release whose turns were
// retired (its corpus keeps only conversations) is carried as a
// deployment must upgrade from it: its turns drained, its idle
// conversation takes its next turn on today's build.
func TestTurnsPausedByEarlierReleasesFinishOnTodaysBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds earlier releases and starts a Temporal dev server")
	}
	root := moduleRoot(t)
	releases, drained := corpusReleases(t, root)
	require.NotEmpty(t, releases)
	builds := buildReleases(t, root, append(slices.Clone(drained), releases...))
	newWorker := proctest.Build(t, "github.com/tollgate/tollgate/worker")
	newAPI := proctest.Build(t, "github.com/tollgate/tollgate/api")
	srv := devserver.ForTest(t)
	model := httptest.NewServer(scripted.New(scripted.Demo()))
	t.Cleanup(model.Close)
	for _, r := range drained {
		t.Run(r, func(t *testing.T) {
			oldWorker, oldAPI := builds[r](t)
			upgradeIdleFrom(t, r, srv, model.URL, oldWorker, oldAPI, newWorker(), newAPI())
		})
	}
	ledgers := 0
	for _, r := range releases {
		t.Run(r, func(t *testing.T) {
			oldWorker, oldAPI := builds[r](t)
			if upgradeFrom(t, r, srv, model.URL, oldWorker, oldAPI, newWorker(), newAPI()) {
				ledgers++
			}
		})
	}
	require.NotZero(t, ledgers, "no earlier release kept a ledger whose rows today's build completed")
}

// releaseEnv is the environment of a worker or an API of the upgrade from
// release, serving HTTP at httpAddr.
func releaseEnv(release string, srv *devserver.Server, modelURL, workspace, payloadDir, ledgerPath, httpAddr string) []string {
	return append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "HTTP_ADDR"),
		"TEMPORAL_ADDRESS="+srv.HostPort,
		"TEMPORAL_NAMESPACE="+srv.Namespace,
		"TOLLGATE_TASK_QUEUE=upgrade-"+release,
		"HTTP_ADDR="+httpAddr,
		"TOLLGATE_METRICS_ADDR="+config.MetricsOff,
		"OPENAI_BASE_URL="+modelURL+"/v1",
		"OPENAI_API_KEY=test",
		"OPENAI_MODEL="+scripted.ModelName,
		"TOLLGATE_WORKSPACE="+workspace,
		"TOLLGATE_PAYLOAD_DIR="+payloadDir,
		"TOLLGATE_AUDIT_DB="+ledgerPath,
		"TOLLGATE_APPROVAL_TIMEOUT=10m",
		"TOLLGATE_HEARTBEAT_INTERVAL=1s",
	)
}

// upgradeIdleFrom runs a turn to its end on release's worker and API, as
// a deployment drains a release whose turns today's build no longer
// carries, stops both, and has the conversation take its next turn on
// today's.
func upgradeIdleFrom(t *testing.T, release string, srv *devserver.Server, modelURL, oldWorkerBin, oldAPIBin, newWorkerBin, newAPIBin string) {
	workspace, payloadDir := t.TempDir(), t.TempDir()
	ledgerPath := filepath.Join(t.TempDir(), "audit.db")
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "README.md"), []byte("# upgrade\n"), 0o644))
	env := func(httpAddr string) []string {
		return releaseEnv(release, srv, modelURL, workspace, payloadDir, ledgerPath, httpAddr)
	}
	c, err := srv.Dial()
	require.NoError(t, err)
	defer c.Close()

	oldAddr := proctest.FreeAddr(t)
	oldWorker := proctest.Start(t, "worker-"+release, oldWorkerBin, env(proctest.FreeAddr(t)))
	oldAPI := proctest.Start(t, "api-"+release, oldAPIBin, env(oldAddr))
	waitHealthy(t, oldAddr)
	conv := "upgrade-idle-" + release
	first := chat(t, oldAddr, conv, "tidy up")
	events := first.until(t, func(events []protocol.Event) bool {
		return len(ofType(events, protocol.EventApprovalRequest)) == 2
	})
	for _, r := range ofType(events, protocol.EventApprovalRequest) {
		approve(t, oldAddr, r.RequestID)
	}
	events = first.until(t, contract.Finished)
	require.Equal(t, protocol.FinishStop, events[len(events)-1].Reason)
	first.close()

	oldAPI.Stop(t)
	oldWorker.Stop(t)
	proctest.Start(t, "worker-today", newWorkerBin, env(proctest.FreeAddr(t)))
	newAddr := proctest.FreeAddr(t)
	proctest.Start(t, "api-today", newAPIBin, env(newAddr))
	waitHealthy(t, newAddr)
	nextTurnOnToday(t, c, newAddr, conv)
}

// nextTurnOnToday has the conversation conv, begun by an earlier release,
// take its next turn (its second) through today's API, and requires that
// the turn ran on today's code paths: today's patch level, no patch of it
// asked.
func nextTurnOnToday(t *testing.T, c client.Client, addr, conv string) {
	t.Helper()
	next := chat(t, addr, conv, "once more")
	events := next.until(t, func(events []protocol.Event) bool {
		return len(ofType(events, protocol.EventApprovalRequest)) == 2
	})
	require.Equal(t, contract.TurnWorkflowID(conv, 2), events[0].TurnID)
	for _, r := range ofType(events, protocol.EventApprovalRequest) {
		approve(t, addr, r.RequestID)
	}
	events = next.until(t, contract.Finished)
	require.Equal(t, protocol.FinishStop, events[len(events)-1].Reason)
	require.Equal(t, []string{"Read ok", "Write ok", "Bash ok"}, statuses(ofType(events, protocol.EventToolResult)[0].ToolResults))
	require.Subset(t, workflows.PatchesAfterLevel(), patches(t, c, events[0].TurnID), "the turn started on today's build asked no patch of its level")
	require.Equal(t, workflows.PatchLevel, patchLevel(t, c, events[0].TurnID), "it took today's patches with the level it recorded")
}

// upgradeFrom pauses a turn on release's worker and API, with one call of
// its batch decided, stops both, and finishes the turn on today's. It
// reports whether the release kept an audit ledger, whose rows of the
// turn today's build then completed.
func upgradeFrom(t *testing.T, release string, srv *devserver.Server, modelURL, oldWorkerBin, oldAPIBin, newWorkerBin, newAPIBin string) bool {
	workspace, payloadDir := t.TempDir(), t.TempDir()
	ledgerPath := filepath.Join(t.TempDir(), "audit.db")
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "README.md"), []byte("# upgrade\n"), 0o644))
	env := func(httpAddr string) []string {
		return releaseEnv(release, srv, modelURL, workspace, payloadDir, ledgerPath, httpAddr)
	}
	c, err := srv.Dial()
	require.NoError(t, err)
	defer c.Close()

	// The earlier release starts the turn; it pauses at its two
	// approvals, and one of them is decided.
	oldAddr := proctest.FreeAddr(t)
	oldWorker := proctest.Start(t, "worker-"+release, oldWorkerBin, env(proctest.FreeAddr(t)))
	oldAPI := proctest.Start(t, "api-"+release, oldAPIBin, env(oldAddr))
	waitHealthy(t, oldAddr)
	conv := "upgrade-" + release
	first := chat(t, oldAddr, conv, "tidy up")
	before := first.until(t, func(events []protocol.Event) bool {
		return len(ofType(events, protocol.EventApprovalRequest)) == 2
	})
	requests := ofType(before, protocol.EventApprovalRequest)
	require.Equal(t, []string{protocol.ToolWrite, protocol.ToolBash}, []string{requests[0].ToolName, requests[1].ToolName})
	approve(t, oldAddr, requests[0].RequestID)
	before = first.until(t, func(events []protocol.Event) bool {
		return len(ofType(events, protocol.EventApprovalDecision)) == 1
	})
	first.close()
	turnID := before[0].TurnID
	lastSeen := before[len(before)-1].Seq
	pausedPatches := patches(t, c, turnID)
	// A release that keeps a ledger has written the paused calls' rows.
	// They are counted without today's auditdb, which would add its chain
	// to the ledger while the earlier release still writes it: today's
	// build makes the chain when it starts, as a deployment does.
	pausedRows := countLedgerRows(t, ledgerPath, conv)

	// A deployment: both stop, today's build starts.
	oldAPI.Stop(t)
	oldWorker.Stop(t)
	proctest.Start(t, "worker-today", newWorkerBin, env(proctest.FreeAddr(t)))
	newAddr := proctest.FreeAddr(t)
	proctest.Start(t, "api-today", newAPIBin, env(newAddr))
	waitHealthy(t, newAddr)

	// The other call is decided through today's API, and the stream
	// resumes where the earlier release's left off.
	approve(t, newAddr, requests[1].RequestID)
	resumed := resume(t, newAddr, turnID, lastSeen)
	after := resumed.until(t, contract.Finished)
	require.Equal(t, lastSeen+1, after[0].Seq, "the resumed stream starts right after the last event seen")
	whole := append(append([]protocol.Event{}, before...), after...)
	for i, e := range whole {
		require.Equal(t, i+1, e.Seq, "event %d (%s) arrives once, in order", i+1, e.Type)
	}
	finish := whole[len(whole)-1]
	require.Equal(t, protocol.FinishStop, finish.Reason)
	results := ofType(whole, protocol.EventToolResult)
	require.Len(t, results, 1)
	require.Equal(t, []string{"Read ok", "Write ok", "Bash ok"}, statuses(results[0].ToolResults),
		"the call approved on %s and the one approved today both ran", release)
	require.FileExists(t, filepath.Join(workspace, scripted.DemoNotePath))
	if pausedRows > 0 {
		rows := ledgerRows(t, ledgerPath, conv)
		require.Len(t, rows, pausedRows, "the calls the earlier release asked about, and no more")
		for _, r := range rows {
			require.Equal(t, audit.StageEnded, r.Stage, "today's build completed the row of %s that %s began", r.Tool, release)
			require.Equal(t, audit.OutcomeOK, r.Outcome, r.Tool)
			require.Equal(t, protocol.DecisionApprove, r.Decision, r.Tool)
		}
		// The rows the earlier release wrote were chained as they were
		// when today's build opened the ledger, and today's writes after.
		l, err := auditdb.Open(context.Background(), ledgerPath)
		require.NoError(t, err)
		defer l.Close()
		v, err := l.Verify(context.Background(), "")
		require.NoError(t, err)
		require.True(t, v.OK, "the ledger's chain after the upgrade from %s: %+v", release, v.FirstBad)
		require.Greater(t, v.Entries, int64(pausedRows), "today's writes have entries after the rows %s wrote", release)
	}

	// Today's build serves the turn's whole log under the ids the
	// earlier release gave it.
	replayed := resume(t, newAddr, turnID, 0).until(t, contract.Finished)
	require.Equal(t, eventIDs(whole), eventIDs(replayed))

	// The conversation the earlier release started takes its next turn,
	// on today's code paths; the paused turn kept those it had begun on
	// (what it ran after its pause asked no GetVersion).
	nextTurnOnToday(t, c, newAddr, conv)
	require.Equal(t, pausedPatches, patches(t, c, turnID), "the turn paused on %s took no patch of today's", release)
	return pausedRows > 0
}

// corpusReleases lists the releases, and the patch levels no release
// carried, that have a replay corpus: in releases those whose corpus holds
// turns (today's build carries their paused turns), in drained those whose
// turns were retired (their corpus keeps only conversations: a deployment
// drains their turns before it takes today's build). The unreleased corpus
// (histories of paths newer than the last corpus, recorded by today's
// code) has no build of its own to carry turns from.
func corpusReleases(t *testing.T, root string) (releases, drained []string) {
	dir := filepath.Join(root, "workflows", "testdata", "replay")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if !e.IsDir() || e.Name() == unreleasedCorpus {
			continue
		}
		turns, err := filepath.Glob(filepath.Join(dir, e.Name(), "*.turn-*.json"))
		require.NoError(t, err)
		if len(turns) > 0 {
			releases = append(releases, e.Name())
		} else {
			drained = append(drained, e.Name())
		}
	}
	return releases, drained
}

// moduleRoot is the folder of the repository this test belongs to.
func moduleRoot(t *testing.T) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// releaseBuildTimeout bounds the build of one release: on two loaded
// cores, with the dependencies to compile, one took over 5 minutes.
const releaseBuildTimeout = 10 * time.Minute

// extracted marks a release's tree in the cache as whole.
const extracted = ".tollgate-extracted"

// buildReleases starts building the worker and the API of each release,
// one after another in the order given, and returns for each a function
// that waits for its build and gives the two binaries. A release's commit
// is its tag's or, where tags were not fetched, the one its replay corpus
// records.
//
// Each release's tree is taken from the repository's history once, into
// the tests' cache (proctest.CacheDir) under its commit, where go build
// leaves binaries that are up to date as they are: built in a new folder
// every run, every package of the release was compiled again, as the
// folder is part of what the build cache keys. One build at a time: on
// two cores builds at once only share them, and with a cold cache each
// would compile the same dependencies.
func buildReleases(t *testing.T, root string, releases []string) map[string]func(*testing.T) (worker, api string) {
	t.Helper()
	cache, out := proctest.CacheDir(t, "releases"), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	type build struct {
		release, commit string
		done            chan error
	}
	builds := make([]build, len(releases))
	waits := map[string]func(*testing.T) (string, string){}
	for i, r := range releases {
		b := build{release: r, commit: releaseCommit(t, root, r), done: make(chan error, 1)}
		builds[i] = b
		require.NoError(t, os.MkdirAll(filepath.Join(out, r), 0o755))
		result := sync.OnceValue(func() error { return <-b.done })
		waits[r] = func(t *testing.T) (string, string) {
			t.Helper()
			require.NoError(t, result())
			return filepath.Join(out, r, "worker"), filepath.Join(out, r, "api")
		}
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for _, b := range builds {
			b.done <- buildRelease(ctx, root, filepath.Join(cache, b.commit), filepath.Join(out, b.release), b.release, b.commit)
		}
	}()
	// The builds write into a folder cleanup removes.
	t.Cleanup(func() { cancel(); <-finished })
	return waits
}

// buildRelease builds the worker and the API of release at commit in tree,
// taking the tree from the repository's history first when it is not
// whole, and links or copies the two binaries into dir. Test processes
// that build the same commit take turns.
func buildRelease(ctx context.Context, root, tree, dir, release, commit string) error {
	ctx, cancel := context.WithTimeout(ctx, releaseBuildTimeout)
	defer cancel()
	return proctest.Locked(tree+".lock", func() error {
		if _, err := os.Stat(filepath.Join(tree, extracted)); err != nil {
			if err := os.RemoveAll(tree); err != nil {
				return err
			}
			if err := os.MkdirAll(tree, 0o755); err != nil {
				return err
			}
			extract := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, commit, tree)
			if out, err := extract.CombinedOutput(); err != nil {
				return fmt.Errorf("extract %s (%s): %w\n%s", release, commit, err, out)
			}
			if err := os.WriteFile(filepath.Join(tree, extracted), nil, 0o644); err != nil {
				return err
			}
		}
		build := exec.CommandContext(ctx, "go", "build", "-o", "bin/", "./worker", "./api")
		build.Dir = tree
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s (%s): %w\n%s", release, commit, err, out)
		}
		for _, name := range []string{"worker", "api"} {
			if err := proctest.LinkOrCopy(filepath.Join(tree, "bin", name), filepath.Join(dir, name)); err != nil {
				return err
			}
		}
		return nil
	})
}

// releaseCommit resolves release to a commit of this repository.
func releaseCommit(t *testing.T, root, release string) string {
	t.Helper()
	commit := ""
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", release+"^{commit}").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	} else {
		b, err := os.ReadFile(filepath.Join(root, "workflows", "testdata", "replay", release, "COMMIT"))
		require.NoError(t, err, "release %s has neither a tag nor a recorded commit", release)
		commit = strings.TrimSpace(string(b))
	}
	err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run()
	require.NoError(t, err, "this checkout lacks commit %s of release %s (a shallow clone? git fetch --unshallow)", commit, release)
	return commit
}

// waitHealthy waits until the API at addr answers GET /healthz with 200.
func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get("http://" + addr + "/healthz")
		require.NoError(c, err)
		resp.Body.Close()
		assert.Equal(c, http.StatusOK, resp.StatusCode)
	}, wait, 50*time.Millisecond, "the API at %s is healthy", addr)
}

// stream is a turn's SSE stream being read: the numbered events so far.
type stream struct {
	resp   *http.Response
	events chan protocol.Event
	seen   []protocol.Event
}

// chat posts a message to the conversation and reads the turn's stream.
func chat(t *testing.T, addr, conv, query string) *stream {
	t.Helper()
	body, err := json.Marshal(map[string]string{"query": query, "conversationId": conv})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/chat/stream", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return open(t, req)
}

// resume reads the turn's stream after event lastSeen, by Last-Event-ID.
func resume(t *testing.T, addr, turnID string, lastSeen int) *stream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/chat/turns/"+turnID+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Last-Event-ID", strconv.Itoa(lastSeen))
	return open(t, req)
}

func open(t *testing.T, req *http.Request) *stream {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s", req.Method, req.URL)
	s := &stream{resp: resp, events: make(chan protocol.Event, 256)}
	go func() {
		defer close(s.events)
		_ = protocol.ReadSSE(resp.Body, func(m protocol.SSEMessage) error {
			if m.ID == "" {
				return nil // a keep-alive
			}
			var e protocol.Event
			if err := json.Unmarshal([]byte(m.Data), &e); err != nil {
				return err
			}
			if strconv.Itoa(e.Seq) != m.ID {
				return fmt.Errorf("event %s carries seq %d", m.ID, e.Seq)
			}
			s.events <- e
			return nil
		})
	}()
	return s
}

// until reads events until done holds for those read so far, and returns
// them.
func (s *stream) until(t *testing.T, done func([]protocol.Event) bool) []protocol.Event {
	t.Helper()
	deadline := time.After(wait)
	for !done(s.seen) {
		select {
		case e, ok := <-s.events:
			require.True(t, ok, "the stream ended after %d events: %v", len(s.seen), types(s.seen))
			s.seen = append(s.seen, e)
		case <-deadline:
			require.Fail(t, "no such event in time", "after %d events: %v", len(s.seen), types(s.seen))
		}
	}
	return s.seen
}

func (s *stream) close() { s.resp.Body.Close() }

// approve approves request through the API at addr.
func approve(t *testing.T, addr, requestID string) {
	t.Helper()
	body, err := json.Marshal(map[string]string{"requestId": requestID, "decision": protocol.DecisionApprove})
	require.NoError(t, err)
	resp, err := http.Post("http://"+addr+"/chat/approval", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "approve %s through %s: %s", requestID, addr, answer)
	var out struct {
		Accepted bool `json:"accepted"`
	}
	require.NoError(t, json.Unmarshal(answer, &out))
	require.True(t, out.Accepted, "approval of %s accepted", requestID)
}

func ofType(events []protocol.Event, typ string) []protocol.Event {
	var out []protocol.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func types(events []protocol.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// eventIDs lists each event by its id and what a client holds of it.
func eventIDs(events []protocol.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%d %s %s %s %q", e.Seq, e.Type, e.RequestID, e.ToolCallID, e.Data)
	}
	return out
}

func statuses(results []protocol.ToolResult) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = r.Name + " " + r.Status
	}
	return out
}

// ledgerRows reads the audit ledger's rows of conversation conv, from the
// SQLite file the workers share (an earlier release may have kept none:
// then there is no file, or no table).
func ledgerRows(t *testing.T, path, conv string) []audit.Record {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	l, err := auditdb.Open(context.Background(), path)
	require.NoError(t, err)
	defer l.Close()
	page, err := l.List(context.Background(), auditdb.Filter{Conversation: conv, Limit: auditdb.MaxLimit})
	require.NoError(t, err)
	return page.Records
}

// countLedgerRows counts the audit ledger's rows of conversation conv in
// the SQLite file at path with database/sql alone, changing nothing (0
// when the release kept no ledger: no file, or no table).
func countLedgerRows(t *testing.T, path, conv string) int {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return 0
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer db.Close()
	var tables int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tollgate_audit'").Scan(&tables))
	if tables == 0 {
		return 0
	}
	var n int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM tollgate_audit WHERE conversation_id = ?", conv).Scan(&n))
	return n
}

// patchLevel is the patch level workflow id recorded with its settings
// (workflows.Settings.PatchLevel), 0 when it recorded none.
func patchLevel(t *testing.T, c client.Client, id string) int {
	t.Helper()
	sideEffects := markers(t, c, id, "SideEffect")
	if len(sideEffects) == 0 {
		return 0
	}
	// The settings are the workflow's first SideEffect.
	var settings workflows.Settings
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(sideEffects[0].GetDetails()["data"], &settings))
	return settings.PatchLevel
}

// patches lists the change ids of the version markers in the history of
// workflow id: the patched code paths it took.
func patches(t *testing.T, c client.Client, id string) []string {
	t.Helper()
	var ids []string
	for _, m := range markers(t, c, id, "Version") {
		var changeID string
		require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["change-id"], &changeID))
		ids = append(ids, changeID)
	}
	return ids
}

// markers are the markers named name in the history of workflow id, in
// order.
func markers(t *testing.T, c client.Client, id, name string) []*historypb.MarkerRecordedEventAttributes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out []*historypb.MarkerRecordedEventAttributes
	iter := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		if m := e.GetMarkerRecordedEventAttributes(); m.GetMarkerName() == name {
			out = append(out, m)
		}
	}
	return out
}
