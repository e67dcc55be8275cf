package metrics

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.temporal.io/sdk/client"
)

// cached is the SDK's OpenTelemetry handler with what it builds kept for
// the next time it is asked for the same thing. The SDK asks its handler
// for tagged handlers and instruments with every task and every request
// (WithTags({"operation": ...}), then Timer or Counter), and the
// OpenTelemetry handler builds each anew: a new attribute set from all
// the tags so far, and an instrument looked up in the meter under its
// lock. In a worker's CPU profile under load the SDK's metrics took a
// tenth of its time and the building some 4% of it (issue 28); the
// cache's lookups take some 1.5%. The handler keeps no state of its own
// that could be reused, and no other handler the SDK serves here (its
// tally contrib is not served) does less, hence this cache in front of it.
//
// It keeps one handler per sequence of WithTags calls and one instrument
// per such handler and name: for the SDK's own tags (namespace, task
// queue, workflow and activity types, operations) some hundreds. But the
// SDK tags a polled task with its workflow type before it checks that the
// worker knows the type, so whoever may start workflows on the task queue
// can make new tag sets at will; the exporter caps each metric at 2,000
// series, and the cache stops at maxCached entries. Past that, what is
// new is made each time as without the cache, and nothing is lost.
type cached struct {
	inner client.MetricsHandler
	// key names inner's tags: the keys of the WithTags calls that made
	// it, each sorted, in order.
	key   string
	store *cacheStore
}

// cacheStore is what every handler derived from one cached shares.
type cacheStore struct {
	// entries counts what the maps hold, all four.
	entries  atomic.Int64
	handlers sync.Map // key → *cached
	counters sync.Map // instrumentKey → client.MetricsCounter
	gauges   sync.Map // instrumentKey → client.MetricsGauge
	timers   sync.Map // instrumentKey → client.MetricsTimer
}

// maxCached bounds the entries of one cacheStore: far above what a
// worker's own tags make, and well under what a hostile one could.
var maxCached int64 = 10_000

// keep stores v under k in m unless the store is full, and returns what m
// holds under k then: v, another made meanwhile, or v unkept.
func keep[T any](s *cacheStore, m *sync.Map, k any, v T) T {
	if s.entries.Load() >= maxCached {
		return v
	}
	got, loaded := m.LoadOrStore(k, v)
	if !loaded {
		s.entries.Add(1)
	}
	return got.(T)
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
	return keep(c.store, &c.store.handlers, key, &cached{inner: c.inner.WithTags(tags), key: key, store: c.store})
}

// Unwrap returns the OpenTelemetry handler of this handler's tags, as the
// SDK's wrappers do, so that opentelemetry.ExtractMetricsHandler finds it.
func (c *cached) Unwrap() client.MetricsHandler { return c.inner }

// Counter returns the counter name of this handler's tags, made once.
func (c *cached) Counter(name string) client.MetricsCounter {
	return instrument(c.store, &c.store.counters, instrumentKey{c.key, name}, func() client.MetricsCounter { return c.inner.Counter(name) })
}

// Gauge returns the gauge name of this handler's tags, made once.
func (c *cached) Gauge(name string) client.MetricsGauge {
	return instrument(c.store, &c.store.gauges, instrumentKey{c.key, name}, func() client.MetricsGauge { return c.inner.Gauge(name) })
}

// Timer returns the timer name of this handler's tags, made once.
func (c *cached) Timer(name string) client.MetricsTimer {
	return instrument(c.store, &c.store.timers, instrumentKey{c.key, name}, func() client.MetricsTimer { return c.inner.Timer(name) })
}

// instrument returns the instrument of m under k, made by build the first
// time (or every time, once the store is full).
func instrument[T any](s *cacheStore, m *sync.Map, k instrumentKey, build func() T) T {
	if v, ok := m.Load(k); ok {
		return v.(T)
	}
	return keep(s, m, k, build())
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
