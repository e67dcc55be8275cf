package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/opentelemetry"
)

// TestTheSameTagsGiveTheSameHandlerAndInstrumentsWhateverTheirOrder asks
// for handlers the way the SDK does (tags upon tags), and requires that a
// handler or instrument asked for again is the one made the first time,
// that different tags are different series, and that every record lands
// in the series of its own tags.
func TestTheSameTagsGiveTheSameHandlerAndInstrumentsWhateverTheirOrder(t *testing.T) {
	r := newRegistry(t, nil)
	worker := r.Handler().WithTags(map[string]string{"namespace": "default", "task_queue": "q"})
	a := worker.WithTags(map[string]string{"operation": "Poll", "status": "ok"})
	b := worker.WithTags(map[string]string{"status": "ok", "operation": "Poll"})
	require.Same(t, a, b)
	a.Counter("temporal_request")
	b.Counter("temporal_request")
	made := 0
	a.(*cached).store.counters.Range(func(any, any) bool { made++; return true })
	require.Equal(t, 1, made, "the counter of the same tags and name is made once")

	// What the SDK's contrib package offers for raw use still finds the
	// OpenTelemetry handler, with the tags.
	raw := opentelemetry.ExtractMetricsHandler(a)
	require.NotNil(t, raw)
	set := raw.GetAttributes()
	tag, ok := set.Value("operation")
	require.True(t, ok)
	require.Equal(t, "Poll", tag.AsString())

	other := worker.WithTags(map[string]string{"operation": "Respond", "status": "ok"})
	require.NotSame(t, a, other)
	// A value may not pass for a pair: {"a": "1:b1:c"} is not {"a": "1", "b": "c"}.
	require.NotSame(t, worker.WithTags(map[string]string{"a": "1:b1:c"}), worker.WithTags(map[string]string{"a": "1", "b": "c"}))

	a.Counter("temporal_request").Inc(2)
	b.Counter("temporal_request").Inc(3)
	other.Counter("temporal_request").Inc(7)
	worker.WithTags(map[string]string{"operation": "Poll"}).Counter("temporal_request").Inc(11)
	require.Equal(t, 5.0, r.Sum("temporal_request_total", map[string]string{"operation": "Poll", "status": "ok"}))
	require.Equal(t, 7.0, r.Sum("temporal_request_total", map[string]string{"operation": "Respond"}))
	require.Equal(t, 16.0, r.Sum("temporal_request_total", map[string]string{"operation": "Poll"}))
	require.Equal(t, 23.0, r.Sum("temporal_request_total", map[string]string{"task_queue": "q"}))

	a.Gauge("temporal_slots").Update(4)
	b.Gauge("temporal_slots").Update(6)
	require.Equal(t, 6.0, r.Sum("temporal_slots", map[string]string{"operation": "Poll"}))
	a.Timer("temporal_latency").Record(time.Second)
	b.Timer("temporal_latency").Record(time.Second)
	require.Equal(t, uint64(2), r.Count("temporal_latency_seconds", map[string]string{"operation": "Poll"}))
}

// BenchmarkTaggedRecord records what the SDK records for one request, a
// tagged handler's timer and counter, through the cache and through the
// OpenTelemetry handler alone; run with -benchmem for the allocations.
func BenchmarkTaggedRecord(b *testing.B) {
	bare := func() client.MetricsHandler {
		p := sdkmetric.NewMeterProvider()
		b.Cleanup(func() { _ = p.Shutdown(b.Context()) })
		return opentelemetry.NewMetricsHandler(opentelemetry.MetricsHandlerOptions{Meter: p.Meter(meterName), UseMonotonicCounters: true})
	}
	for _, way := range []struct {
		name string
		h    func() client.MetricsHandler
	}{{"opentelemetry", bare}, {"cached", func() client.MetricsHandler { return newCached(bare()) }}} {
		b.Run(way.name, func(b *testing.B) {
			worker := way.h().WithTags(map[string]string{"namespace": "default", "task_queue": "q", "worker_type": "WorkflowWorker"})
			ops := make([]string, 8)
			for i := range ops {
				ops[i] = fmt.Sprint("op", i)
			}
			i := 0
			for b.Loop() {
				h := worker.WithTags(map[string]string{"operation": ops[i%len(ops)]})
				h.Timer("temporal_request_latency").Record(time.Millisecond)
				h.Counter("temporal_request").Inc(1)
				i++
			}
		})
	}
}

// TestAFullCacheMakesWhatIsNewEachTimeAndLosesNothing gives the cache more
// tag sets than it keeps (the SDK tags a polled task with any workflow
// type a client starts): it stops growing at its bound, and every record
// still lands in its series.
func TestAFullCacheMakesWhatIsNewEachTimeAndLosesNothing(t *testing.T) {
	old := maxCached
	maxCached = 5
	t.Cleanup(func() { maxCached = old })
	r := newRegistry(t, nil)
	worker := r.Handler().WithTags(map[string]string{"task_queue": "q"})
	for i := range 50 {
		for range 2 {
			worker.WithTags(map[string]string{"workflow_type": fmt.Sprint("type-", i)}).Counter("temporal_workflow_task_queue_poll_succeed").Inc(1)
		}
	}
	require.Equal(t, int64(5), worker.(*cached).store.entries.Load())
	require.Equal(t, 100.0, r.Sum("temporal_workflow_task_queue_poll_succeed_total", nil))
	require.Equal(t, 2.0, r.Sum("temporal_workflow_task_queue_poll_succeed_total", map[string]string{"workflow_type": "type-49"}))
}
