package docstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/protocol"
)

const (
	// burstTurns and burstClients are the burst that once wedged make
	// dev's server for good (issue 28): 400 turns from 8 clients at once.
	burstTurns   = 400
	burstClients = 8
	// restartSays is what make dev says as it restarts its dev server.
	restartSays = "the Temporal dev server has not answered for"
	// burstRequestTimeout bounds one turn's request in the burst: a stack
	// that neither streams nor refuses within it counts as stuck. It is
	// longer than make dev takes to notice a dev server that stopped
	// answering and restart it, which a stream already open waits out.
	burstRequestTimeout = 2 * time.Minute
	// recoveryWithin is how soon after the burst a new turn must stream to
	// its approval request again.
	recoveryWithin = time.Minute
)

// turnOutcome is how one POST /chat/stream of the burst ended: "approval"
// when it streamed to its approval request, else the status and what the
// API said.
type turnOutcome struct {
	status     int
	retryAfter string
	what       string
}

// startTurnToApproval sends a turn that asks for approval and reads its
// stream until the approval request.
func startTurnToApproval(ctx context.Context, api string) turnOutcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/chat/stream",
		strings.NewReader(`{"query":"tidy up the workspace"}`))
	if err != nil {
		return turnOutcome{what: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return turnOutcome{what: "no answer: " + err.Error()}
	}
	defer resp.Body.Close()
	out := turnOutcome{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		out.what = strings.TrimSpace(string(b))
		return out
	}
	errApproval := errors.New("approval")
	err = protocol.ReadSSE(resp.Body, func(m protocol.SSEMessage) error {
		var ev struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if json.Unmarshal([]byte(m.Data), &ev) != nil {
			return nil
		}
		switch ev.Type {
		case protocol.EventApprovalRequest:
			return errApproval
		case protocol.EventError:
			return errors.New("error event: " + ev.Message)
		}
		return nil
	})
	switch {
	case errors.Is(err, errApproval):
		out.what = "approval"
	case err != nil:
		out.what = "stream: " + err.Error()
	default:
		out.what = "stream ended before its approval request"
	}
	return out
}

// TestMakeDevAnswersAgainWithinAMinuteOfABurst starts 400 turns from 8
// clients at once on make dev's own stack (scripts/dev.sh: its dev server
// flags, worker and API) and requires that every one either streams to
// its approval request or is refused with a 503 and Retry-After (never a
// 500, never a hang), and that a new turn streams to its approval request
// within a minute of the burst's end.
func TestMakeDevAnswersAgainWithinAMinuteOfABurst(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make dev's stack under a burst")
	}
	temporalCLI, err := devserver.Binary()
	require.NoError(t, err)
	stack := startDevStack(t, temporalCLI, true)
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"api", "temporal", "worker"} {
				b, _ := os.ReadFile(filepath.Join(stack.state, "logs", name+".log"))
				t.Logf("the end of %s.log:\n%s", name, b[max(0, len(b)-6000):])
			}
		}
	})

	start := time.Now()
	outcomes := make(chan turnOutcome, burstTurns)
	var wg sync.WaitGroup
	for c := range burstClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < burstTurns; i += burstClients {
				ctx, cancel := context.WithTimeout(context.Background(), burstRequestTimeout)
				out := startTurnToApproval(ctx, stack.api)
				cancel()
				outcomes <- out
			}
		}()
	}
	wg.Wait()
	close(outcomes)
	burst := time.Since(start)

	counts := map[string]int{}
	var bad []string
	for o := range outcomes {
		switch {
		case o.what == "approval":
			counts["approval"]++
		case o.status == http.StatusServiceUnavailable && o.retryAfter != "":
			counts["503"]++
		default:
			key := fmt.Sprintf("%d %s", o.status, o.what)
			if counts[key] == 0 {
				bad = append(bad, key)
			}
			counts[key]++
		}
	}
	wal := int64(-1)
	if st, err := os.Stat(filepath.Join(stack.state, "temporal.db-wal")); err == nil {
		wal = st.Size()
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var summary strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&summary, "\n  %4d  %s", counts[k], k)
	}
	serverLog, _ := os.ReadFile(filepath.Join(stack.state, "logs", "temporal.log"))
	restarts := strings.Count(string(serverLog), "dev: restarting the dev server")
	t.Logf("burst of %d turns from %d clients took %s; WAL %.1f MB; dev server restarted %d times; outcomes:%s",
		burstTurns, burstClients, burst.Round(time.Millisecond), float64(wal)/(1<<20), restarts, summary.String())
	if os.Getenv(devserver.EnvBinary) == "" {
		// make temporal's build (TestTheCLIIsBuiltWithTheSQLiteDriverThatDoesNotWedge):
		// its dev server holds the burst, with no restart to bring it back.
		require.Zero(t, restarts, "make dev's dev server (bin/temporal, built from third_party/temporal-cli) stops answering under the burst")
	}

	// The stack answers again: a new turn streams to its approval request.
	end := time.Now()
	var last turnOutcome
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		last = startTurnToApproval(ctx, stack.api)
		cancel()
		if last.what == "approval" {
			t.Logf("a new turn streamed to its approval request %s after the burst (attempt %d)", time.Since(end).Round(time.Millisecond), attempt)
			break
		}
		if time.Since(end) > recoveryWithin {
			t.Fatalf("no new turn streamed to its approval request within %s of the burst; the last answer: %d %s", recoveryWithin, last.status, last.what)
		}
		time.Sleep(time.Second) // a retry's pace, as Retry-After asks
	}
	require.Empty(t, bad, "every turn of the burst streams to its approval request or is refused with 503 and Retry-After")
}

// devServerPID finds the dev server make dev runs on port: the Temporal
// CLI's `server start-dev` process with that --port.
func devServerPID(t *testing.T, port string) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, "start-dev") && slices.Contains(args, "--port") && args[slices.Index(args, "--port")+1] == port {
			pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			require.NoError(t, err)
			return pid
		}
	}
	t.Fatalf("no dev server process on port %s", port)
	return 0
}

// TestMakeDevRestartsADevServerThatStopsAnswering stops make dev's dev
// server (SIGSTOP: it keeps its port and answers nothing, as a dev server
// whose SQLite connection refuses every statement does) and requires that
// make dev says so, restarts it, and that a new turn streams to its
// approval request within a minute. make dev asks its server here every
// second, for 2 s at most (its defaults, 5 s and 5 s, took half a minute
// to notice); the burst's test runs it with the defaults.
func TestMakeDevRestartsADevServerThatStopsAnswering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make dev's stack")
	}
	temporalCLI, err := devserver.Binary()
	require.NoError(t, err)
	stack := startDevStack(t, temporalCLI, true, "TOLLGATE_DEV_PROBE_EVERY=1", "TOLLGATE_DEV_PROBE_TIMEOUT=2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out := startTurnToApproval(ctx, stack.api)
	cancel()
	require.Equal(t, "approval", out.what, "a turn streams to its approval request first: %+v", out)
	_, port, err := net.SplitHostPort(stack.temporalAddr)
	require.NoError(t, err)
	pid := devServerPID(t, port)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	stopped := time.Now()

	stack.dev.waitLine(t, restartSays, recoveryWithin)
	t.Logf("make dev saw the dev server not answer after %s", time.Since(stopped).Round(time.Millisecond))
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		out := startTurnToApproval(ctx, stack.api)
		cancel()
		if out.what == "approval" {
			break
		}
		require.Less(t, time.Since(stopped), recoveryWithin+30*time.Second,
			"no turn streamed to its approval request after the dev server was restarted; the last answer: %d %s", out.status, out.what)
		time.Sleep(time.Second) // a retry's pace, as Retry-After asks
	}
	t.Logf("a new turn streamed to its approval request %s after the dev server stopped answering", time.Since(stopped).Round(time.Millisecond))
	require.NotEqual(t, pid, devServerPID(t, port), "a new dev server serves the port")
}
