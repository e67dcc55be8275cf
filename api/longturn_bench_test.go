package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/workflows"
)

// The long turn of the size benchmark: 25 steps of 4 Reads of 26 KB each.
const (
	longTurnSteps    = 25
	longTurnReads    = 4
	longTurnFileSize = 26 << 10
)

// Markers of the section BenchmarkLongTurnHistory writes into
// $TOLLGATE_BENCH_OUT. It sits among the notes that BenchmarkTollgate keeps
// (after notesMarker), and only this benchmark replaces it.
const (
	longTurnBegin = "<!-- long-turn: written by BenchmarkLongTurnHistory -->"
	longTurnEnd   = "<!-- /long-turn -->"
)

// longTurnResult is what one run of the long turn left.
type longTurnResult struct {
	status       string
	steps        int
	historyBytes int
	events       int
	storeBytes   int
}

// BenchmarkLongTurnHistory runs the long turn once without a payload store
// (every payload inline, as v0.2.0 did) and once with the local-folder
// store, on a dev server with default limits, and reports history bytes (as
// GetWorkflowExecutionHistory returns them), history events and the bytes
// the store holds.
//
//	go test -run '^$' -bench '^BenchmarkLongTurnHistory$' -benchtime 1x ./api/
func BenchmarkLongTurnHistory(b *testing.B) {
	srv := devserver.ForTest(b)
	workspace := b.TempDir()
	for i := range longTurnSteps * longTurnReads {
		var f strings.Builder
		for line := 0; f.Len() < longTurnFileSize; line++ {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d", i, line))
			fmt.Fprintf(&f, "%5d  %x\n", line, sum[:20])
		}
		if err := os.WriteFile(filepath.Join(workspace, fmt.Sprintf("f%03d.txt", i)), []byte(f.String()[:longTurnFileSize]), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		step := countRole(req.Messages, openai.ChatMessageRoleAssistant)
		if step >= longTurnSteps {
			return scripted.Reply{Content: "Read them all."}
		}
		var calls []activities.ToolCall
		for i := range longTurnReads {
			n := step*longTurnReads + i
			calls = append(calls, activities.ToolCall{ID: fmt.Sprintf("call_%03d", n), Name: activities.ToolRead, Arguments: fmt.Sprintf(`{"file_path":"f%03d.txt"}`, n)})
		}
		return scripted.Reply{ToolCalls: calls}
	}
	model := httptest.NewServer(scripted.New(script))
	b.Cleanup(model.Close)

	var inline, stored longTurnResult
	for range b.N {
		inline = runLongTurn(b, srv, model.URL, workspace, "")
		stored = runLongTurn(b, srv, model.URL, workspace, b.TempDir())
	}
	md := fmt.Sprintf(`%s
## History of a long turn

Written by `+"`make bench`"+` (BenchmarkLongTurnHistory) on %s: one turn of %d steps, each with %d Reads of
%d KiB files, on a dev server with default limits; history bytes as GetWorkflowExecutionHistory returns
them.

| | steps done | turn | history | history events | payload store |
|---|---:|---|---:|---:|---:|
| payloads inline (v0.2.0) | %d | %s | %d KiB | %d | none |
| payload store (local folder) | %d | %s | %d KiB | %d | %d KiB |

The files read come to %d KiB in all. Inline, every model call carries the conversation so far, so
the turn outgrows Temporal's 2 MB payload limit before its last step. With the store, history holds
claims; the store cuts payloads into content-defined chunks and keeps each chunk once. What it holds
beyond one copy of the files is the chunks where a tool output meets what surrounds it in each
payload that carries it (its own result, each later model call, the turn's result), and the
manifests (32 bytes a chunk).
%s
`, longTurnBegin, time.Now().UTC().Format("2006-01-02 15:04 UTC"), longTurnSteps, longTurnReads, longTurnFileSize>>10,
		inline.steps, inline.status, inline.historyBytes>>10, inline.events,
		stored.steps, stored.status, stored.historyBytes>>10, stored.events, stored.storeBytes>>10,
		longTurnSteps*longTurnReads*longTurnFileSize>>10, longTurnEnd)
	b.Log(md)
	b.ReportMetric(float64(stored.historyBytes), "history-bytes")
	b.ReportMetric(float64(stored.storeBytes), "store-bytes")
	if out := os.Getenv(envBenchOut); out != "" {
		if err := writeLongTurnSection(out, md); err != nil {
			b.Fatal(err)
		}
	}
}

// runLongTurn runs the long turn on a worker of its own, with a payload
// store in storeDir unless it is "", and reports what it left.
func runLongTurn(b *testing.B, srv *devserver.Server, modelURL, workspace, storeDir string) longTurnResult {
	b.Helper()
	opts := srv.ClientOptions()
	if storeDir != "" {
		opts.ExternalStorage, _, _ = payloads.Storage(payloads.Config{Dir: storeDir})
	}
	c, err := client.Dial(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	queue := "long-turn-" + filepath.Base(storeDir)
	tools := &activities.Tools{Workspace: workspace, BashTimeout: 10 * time.Second}
	w := worker.New(c, queue, workflows.WorkerOptions())
	workflows.Register(w, &workflows.Workflows{Settings: workflows.Settings{
		ApprovalTimeout: time.Minute, MaxSteps: longTurnSteps + 1, Tools: tools.Specs(), WorkspaceRoots: []string{workspace},
	}}, activities.NewModel(modelURL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: c}), tools)
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := workflows.TurnWorkflowID("long-"+filepath.Base(queue), 1)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.ChatTurnWorkflow, workflows.TurnInput{
		ConversationID: "long", Turn: 1, Messages: []activities.Message{{Role: activities.RoleUser, Content: "read every file"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	var r longTurnResult
	var out workflows.TurnOutput
	if err := run.Get(ctx, &out); err != nil {
		r.status = "ended: " + strings.SplitN(err.Error(), ":", 2)[0]
	} else {
		r.status = "finished (" + out.FinishReason + ")"
	}
	iter := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			b.Fatal(err)
		}
		r.events++
		r.historyBytes += proto.Size(e)
		if e.GetEventType() == enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED {
			r.steps++ // Reads and model calls; steps below
		}
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED {
			r.status = "terminated: " + e.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
		}
	}
	// Each step completes one model call and its Reads.
	r.steps /= longTurnReads + 1
	if storeDir != "" {
		_ = filepath.WalkDir(storeDir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if info, err := d.Info(); err == nil {
					r.storeBytes += int(info.Size())
				}
			}
			return err
		})
	}
	return r
}

// writeLongTurnSection puts md in place of the long-turn section of path,
// or after the notes marker when there is none yet.
func writeLongTurnSection(path, md string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	text := string(old)
	if before, rest, ok := strings.Cut(text, longTurnBegin); ok {
		_, after, _ := strings.Cut(rest, longTurnEnd)
		text = before + strings.TrimSuffix(md, "\n") + after
	} else if before, after, ok := strings.Cut(text, notesMarker); ok {
		text = before + notesMarker + "\n" + md + after
	} else {
		text += "\n" + notesMarker + "\n" + md
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
