package payloads

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// BenchmarkVisitWorkflowTask is what the SDK's External Storage costs a
// worker on each workflow task it is handed: every payload of the task's
// history visited, at most perMessage at once (ExternalStorageConcurrency's
// MaxOperationsPerMessage), none of them stored. The history is an
// approved call's turn from the replay corpus (update.turn-1).
func BenchmarkVisitWorkflowTask(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "workflows", "testdata", "replay", "unreleased", "update.turn-1.json"))
	if err != nil {
		b.Fatal(err) // the corpus is part of the repository
	}
	var h historypb.History
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &h); err != nil {
		b.Fatal(err)
	}
	task := &workflowservice.PollWorkflowTaskQueueResponse{History: &h}
	keep := func(_ *proxy.VisitPayloadsContext, p []*commonpb.Payload) ([]*commonpb.Payload, error) { return p, nil }
	for _, c := range []struct {
		name       string
		perMessage int
	}{{"8 at once (the SDK's default)", 8}, {"1 at once (a folder)", 1}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := proxy.VisitPayloads(context.Background(), task, proxy.VisitPayloadsOptions{
					Visitor: keep, SkipSearchAttributes: true, ConcurrencyLimit: c.perMessage,
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
