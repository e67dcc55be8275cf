package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The series of the API's and the worker's GET /metrics that the benchmark
// reads (README.md, "Metrics"), and those of the Go and process collectors
// beside them.
const (
	metricEventQueries   = "tollgate_api_event_queries_total"
	metricPollersRunning = "tollgate_api_pollers_running"
	metricOpenStreams    = "tollgate_api_open_streams"
	metricCPU            = "process_cpu_seconds_total"
	metricHeapAlloc      = "go_memstats_heap_alloc_bytes"
	metricStackInuse     = "go_memstats_stack_inuse_bytes"
	// metricGCs is a summary of GC pauses; its count is the GC cycles done.
	metricGCs = "go_gc_duration_seconds"
)

// scrape is one read of a process's GET /metrics.
type scrape map[string]*dto.MetricFamily

// readMetrics scrapes url (a /metrics endpoint) and parses it with the
// Prometheus text parser.
func readMetrics(ctx context.Context, hc *http.Client, url, token string) (scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	return families, nil
}

// value is the sum of a counter's, gauge's or untyped metric's series, or a
// summary's or histogram's count; 0 when the family is absent.
func (s scrape) value(name string) float64 {
	f := s[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		case m.Summary != nil:
			sum += float64(m.GetSummary().GetSampleCount())
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// most is the largest of a gauge's series; 0 when the family is absent.
// The SDK reports its sticky cache's size once per workflow type, each
// series the whole cache's size.
func (s scrape) most(name string) float64 {
	var out float64
	for _, m := range s[name].GetMetric() {
		out = max(out, m.GetGauge().GetValue())
	}
	return out
}

// cpu is process_cpu_seconds_total as a duration.
func (s scrape) cpu() time.Duration {
	return time.Duration(s.value(metricCPU) * float64(time.Second))
}

// metricsReader reads one process's /metrics.
type metricsReader struct {
	url  string
	http *http.Client
	// token, when set, is the bearer token an API that asks for tokens
	// wants on its /metrics too.
	token string
}

func (m metricsReader) read(ctx context.Context) (scrape, error) {
	return readMetrics(ctx, m.http, m.url, m.token)
}

// value reads one series.
func (m metricsReader) value(ctx context.Context, name string) (float64, error) {
	s, err := m.read(ctx)
	if err != nil {
		return 0, err
	}
	return s.value(name), nil
}

// count reads a counter or gauge that counts things.
func (m metricsReader) count(ctx context.Context, name string) (int64, error) {
	v, err := m.value(ctx, name)
	return int64(v), err
}

// memoryGCs is how many GC cycles memory waits for.
const memoryGCs = 3

// memory returns the bytes of the process's live heap objects just after a
// GC, and its goroutine stacks. The API offers no way to collect its
// garbage on demand, so this reads its /metrics over and over (each read
// allocates) until memoryGCs cycles have passed, and takes the least heap
// seen since the first: the objects the GC left, plus the little the reads
// allocated since. The heap is go_memstats_heap_alloc_bytes, which
// fragmentation does not move, so that one stream's share is not lost in
// the noise of the spans in use.
func (m metricsReader) memory(ctx context.Context) (heap, stack float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	s, err := m.read(ctx)
	if err != nil {
		return 0, 0, err
	}
	gc0 := s.value(metricGCs)
	heap = -1
	for {
		if s, err = m.read(ctx); err != nil {
			return 0, 0, fmt.Errorf("memory of %s: %w", m.url, err)
		}
		gcs := s.value(metricGCs) - gc0
		if gcs >= 1 && (heap < 0 || s.value(metricHeapAlloc) < heap) {
			heap = s.value(metricHeapAlloc)
		}
		if gcs >= memoryGCs {
			return heap, s.value(metricStackInuse), nil
		}
	}
}
