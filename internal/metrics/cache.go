package metrics

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.temporal.io/sdk/client"
)

// cached is the SDK's OpenTelemetry handler with what it builds kept for
// the next time it is asked for the same thing. The SDK asks its handler
// for tagged handlers and instruments with every task and every request
// (WithTags({"operation": ...}), then Timer or Counter), and the
// OpenTelemetry handler builds each anew: a new attribute set from all
// the tags so far, and an instrument looked up in the meter under its
// lock. A worker's CPU profile under load put a tenth of its time there
// (issue 28); the handler keeps no state of its own that could be reused,
// and no other handler the SDK serves here (its tally contrib is not
// served) does less, hence this cache in front of it.
//
// What it keeps is bounded by what the exporter keeps anyway: one handler
// per set of tags, one instrument per set of tags and name, and each such
// pair is a series GET /metrics serves.
type cached struct {
	inner client.MetricsHandler
	// key names inner's tags: the keys of the WithTags calls that made
	// it, each sorted, in order.
	key   string
	store *cacheStore
}

// cacheStore is what every handler derived from one cached shares.
type cacheStore struct {
	handlers sync.Map // key → *cached
	counters sync.Map // instrumentKey → client.MetricsCounter
	gauges   sync.Map // instrumentKey → client.MetricsGauge
	timers   sync.Map // instrumentKey → client.MetricsTimer
}

// instrumentKey names an instrument of a tagged handler.
type instrumentKey struct{ tags, name string }

// newCached puts the cache in front of inner.
func newCached(inner client.MetricsHandler) *cached {
	return &cached{inner: inner, store: &cacheStore{}}
}

// WithTags returns the handler with tags added, made once per set.
func (c *cached) WithTags(tags map[string]string) client.MetricsHandler {
	key := tagsKey(c.key, tags)
	if h, ok := c.store.handlers.Load(key); ok {
		return h.(*cached)
	}
	h, _ := c.store.handlers.LoadOrStore(key, &cached{inner: c.inner.WithTags(tags), key: key, store: c.store})
	return h.(*cached)
}

// Unwrap returns the OpenTelemetry handler of this handler's tags, as the
// SDK's wrappers do, so that opentelemetry.ExtractMetricsHandler finds it.
func (c *cached) Unwrap() client.MetricsHandler { return c.inner }

// Counter returns the counter name of this handler's tags, made once.
func (c *cached) Counter(name string) client.MetricsCounter {
	return instrument(&c.store.counters, instrumentKey{c.key, name}, func() client.MetricsCounter { return c.inner.Counter(name) })
}

// Gauge returns the gauge name of this handler's tags, made once.
func (c *cached) Gauge(name string) client.MetricsGauge {
	return instrument(&c.store.gauges, instrumentKey{c.key, name}, func() client.MetricsGauge { return c.inner.Gauge(name) })
}

// Timer returns the timer name of this handler's tags, made once.
func (c *cached) Timer(name string) client.MetricsTimer {
	return instrument(&c.store.timers, instrumentKey{c.key, name}, func() client.MetricsTimer { return c.inner.Timer(name) })
}

// instrument returns the instrument of m under k, made by build the first
// time.
func instrument[T any](m *sync.Map, k instrumentKey, build func() T) T {
	if v, ok := m.Load(k); ok {
		return v.(T)
	}
	v, _ := m.LoadOrStore(k, build())
	return v.(T)
}

// tagsKey is prefix followed by tags as one string, the same whatever the
// map's order: each name and value length-prefixed, so that no value can
// pass for another pair. A call with no tags adds nothing.
func tagsKey(prefix string, tags map[string]string) string {
	if len(tags) == 0 {
		return prefix
	}
	var few [8]string
	names := few[:0]
	for k := range tags {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteByte('{')
	for _, k := range names {
		writeField(&b, k)
		writeField(&b, tags[k])
	}
	b.WriteByte('}')
	return b.String()
}

// writeField writes s with its length before it.
func writeField(b *strings.Builder, s string) {
	var n [20]byte
	b.Write(strconv.AppendInt(n[:0], int64(len(s)), 10))
	b.WriteByte(':')
	b.WriteString(s)
}
