package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

// The long turn: 25 steps of 4 Reads of 26 KB each, on a worker that allows
// one model call more than the steps (the final answer).
const (
	longTurnSteps    = 25
	longTurnReads    = 4
	longTurnFileSize = 26 << 10
	longTurnMaxSteps = longTurnSteps + 1
	longTurnWait     = 3 * time.Minute
	// longTurnInline is a payload threshold past any payload's size, so
	// that the store keeps none and every payload is inline, as in v0.2.0.
	longTurnInline = 1 << 40
)

// longTurnResult is what one run of the long turn left.
type longTurnResult struct {
	status       string
	steps        int
	historyBytes int
	events       int
	storeBytes   int
}

// writeLongTurnFiles writes the files the long turn reads into dir.
func writeLongTurnFiles(dir string) error {
	for i := range longTurnSteps * longTurnReads {
		var f strings.Builder
		for line := 0; f.Len() < longTurnFileSize; line++ {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d", i, line))
			fmt.Fprintf(&f, "%5d  %x\n", line, sum[:20])
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", i)), []byte(f.String()[:longTurnFileSize]), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// longTurnScript asks, at each step, for the next longTurnReads files, and
// answers once all are read.
func longTurnScript(req openai.ChatCompletionRequest) scripted.Reply {
	step := 0
	for _, m := range req.Messages {
		if m.Role == openai.ChatMessageRoleAssistant {
			step++
		}
	}
	if step >= longTurnSteps {
		return scripted.Reply{Content: "Read them all."}
	}
	var calls []protocol.ToolCall
	for i := range longTurnReads {
		n := step*longTurnReads + i
		calls = append(calls, protocol.ToolCall{ID: fmt.Sprintf("call_%03d", n), Name: protocol.ToolRead, Arguments: fmt.Sprintf(`{"file_path":"f%03d.txt"}`, n)})
	}
	return scripted.Reply{ToolCalls: calls}
}

// runLongTurn sends the long turn's message to api and, once the turn has
// closed, reports what its history holds and what storeDir (none when "")
// holds.
func runLongTurn(ctx context.Context, c client.Client, api apiClient, conv, storeDir string) (longTurnResult, error) {
	ctx, cancel := context.WithTimeout(ctx, longTurnWait)
	defer cancel()
	var r longTurnResult
	resp, turnID, err := api.chat(ctx, "read every file", conv)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	events := readStamped(resp.Body)
	if _, err := awaitEvent(ctx, events, protocol.EventTurnStart); err != nil {
		return r, fmt.Errorf("long turn %s: %w", turnID, err)
	}
	finished := make(chan string, 1)
	go func() {
		reason := "no finish event"
		for ev := range events {
			if ev.Type == protocol.EventFinish {
				reason = ev.Reason
				break
			}
		}
		finished <- reason
	}()

	// The history's close event says how the turn ended, whether or not
	// its stream does.
	it := c.GetWorkflowHistory(ctx, turnID, "", true, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	if !it.HasNext() {
		return r, fmt.Errorf("long turn %s has no close event", turnID)
	}
	closed, err := it.Next()
	if err != nil {
		return r, fmt.Errorf("long turn %s did not close: %w", turnID, err)
	}
	switch closed.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
		select {
		case reason := <-finished:
			r.status = "finished (" + reason + ")"
		case <-time.After(benchWait):
			r.status = "finished (its stream did not say how)"
		}
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
		r.status = "terminated: " + closed.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
	default:
		r.status = "ended: " + strings.TrimPrefix(closed.GetEventType().String(), "EVENT_TYPE_")
	}

	h, err := history(ctx, c, turnID)
	if err != nil {
		return r, err
	}
	for _, e := range h {
		r.events++
		r.historyBytes += proto.Size(e)
		if e.GetEventType() == enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED {
			r.steps++ // Reads and model calls; steps below
		}
	}
	// Each step completes one model call and its Reads.
	r.steps /= longTurnReads + 1
	if storeDir != "" {
		err := filepath.WalkDir(storeDir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if info, err := d.Info(); err == nil {
					r.storeBytes += int(info.Size())
				}
			}
			return err
		})
		if err != nil {
			return r, fmt.Errorf("payload store %s: %w", storeDir, err)
		}
	}
	return r, nil
}
