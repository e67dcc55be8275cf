package bench

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// turnSample is one turn's client-side times.
type turnSample struct {
	conv, workflowID string
	// start: the request that starts the turn; headers: its response
	// headers (tollgate only); request: the approval_request event arrives;
	// decide: the decision is sent; decided: its call returns; result: the
	// tool_result event arrives; finish: the finish event arrives.
	start, headers, request, decide, decided, result, finish time.Time
	total                                                    time.Duration
}

func requestLatency(s turnSample) time.Duration { return s.request.Sub(s.start) }
func resultLatency(s turnSample) time.Duration  { return s.result.Sub(s.decide) }

// summary is a latency distribution.
type summary struct{ p50, p95, max time.Duration }

func latencies(samples []turnSample, f func(turnSample) time.Duration) summary {
	ds := make([]time.Duration, len(samples))
	for i, s := range samples {
		ds[i] = f(s)
	}
	return summarize(ds)
}

func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return summary{p50: percentile(ds, 50), p95: percentile(ds, 95), max: ds[len(ds)-1]}
}

// percentile is the nearest-rank percentile of sorted ds.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// medianSample is the sample whose f is the median.
func medianSample(samples []turnSample, f func(turnSample) time.Duration) turnSample {
	sorted := slices.Clone(samples)
	slices.SortFunc(sorted, func(a, b turnSample) int { return cmp.Compare(f(a), f(b)) })
	return sorted[(len(sorted)-1)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
