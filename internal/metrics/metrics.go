// Package metrics is a small in-memory metrics registry that renders the
// Prometheus text exposition format. It implements the Temporal SDK's
// client.MetricsHandler, so the SDK's own metrics (workflow and activity
// latencies, polls, requests) and those that workflow code emits through
// workflow.GetMetricsHandler land in it, and it serves them at /metrics
// without a Prometheus client library.
//
// Names follow Prometheus conventions the way the SDK's Prometheus naming
// does: a counter's name ends in _total, a timer becomes a histogram in
// seconds whose name ends in _seconds, and any character Prometheus does not
// allow becomes an underscore.
package metrics

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
)

// ContentType is the Prometheus text exposition format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// DefaultBuckets are the upper bounds, in seconds, of every timer's
// histogram. They reach from a fast activity (5 ms) to a person who answers
// an approval a day later.
var DefaultBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
	60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600,
}

type kind int

const (
	counterKind kind = iota
	gaugeKind
	histogramKind
)

func (k kind) String() string {
	switch k {
	case counterKind:
		return "counter"
	case gaugeKind:
		return "gauge"
	default:
		return "histogram"
	}
}

// Registry holds every series. Its zero value is ready to use, and it is
// safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	families map[string]*family // by exposed name
	help     map[string]string  // by name as registered (sanitized)
	derived  map[string]derivedGauge
}

// family is one metric name: its kind, help text and series by label set.
type family struct {
	name   string
	kind   kind
	help   string
	series map[string]*series
}

// series is one label set of a family.
type series struct {
	labels string // rendered: k1="v1",k2="v2", sorted by key
	tags   map[string]string

	count atomic.Int64  // counter value
	bits  atomic.Uint64 // gauge value as float64 bits

	mu      sync.Mutex // guards the histogram below
	buckets []uint64   // per bucket, not cumulative
	sum     float64
	total   uint64
}

// derivedGauge is a gauge computed when the registry is rendered.
type derivedGauge struct {
	help string
	fn   func() float64
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Handler returns the registry as the SDK's metrics handler, with no tags.
func (r *Registry) Handler() client.MetricsHandler { return handler{r: r} }

// Describe sets the help text of the metric registered as name (before
// the _total or _seconds suffix is added), used or not yet.
func (r *Registry) Describe(name, help string) {
	key := sanitizeName(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.help == nil {
		r.help = map[string]string{}
	}
	r.help[key] = help
	for _, k := range []kind{counterKind, gaugeKind, histogramKind} {
		if f := r.families[exposedName(key, k)]; f != nil && f.kind == k {
			f.help = help
		}
	}
}

// GaugeFunc adds a gauge whose value fn computes at every rendering. fn runs
// without the registry's lock held, so it may call Sum.
func (r *Registry) GaugeFunc(name, help string, fn func() float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.derived == nil {
		r.derived = map[string]derivedGauge{}
	}
	r.derived[sanitizeName(name)] = derivedGauge{help: help, fn: fn}
}

// Sum adds up the counters or gauges registered as name whose labels
// include every pair in match (nil matches all).
func (r *Registry) Sum(name string, match map[string]string) float64 {
	var total float64
	r.each(name, match, func(f *family, s *series) {
		switch f.kind {
		case counterKind:
			total += float64(s.count.Load())
		case gaugeKind:
			total += math.Float64frombits(s.bits.Load())
		}
	})
	return total
}

// Count adds up how many durations the timers registered as name recorded,
// over those whose labels include every pair in match.
func (r *Registry) Count(name string, match map[string]string) uint64 {
	var total uint64
	r.each(name, match, func(f *family, s *series) {
		if f.kind == histogramKind {
			s.mu.Lock()
			total += s.total
			s.mu.Unlock()
		}
	})
	return total
}

func (r *Registry) each(name string, match map[string]string, fn func(*family, *series)) {
	key := sanitizeName(name)
	r.mu.Lock()
	var found []*family
	for _, k := range []kind{counterKind, gaugeKind, histogramKind} {
		if f := r.families[exposedName(key, k)]; f != nil && f.kind == k {
			found = append(found, f)
		}
	}
	type hit struct {
		f *family
		s *series
	}
	var hits []hit
	for _, f := range found {
	series:
		for _, s := range f.series {
			for k, v := range match {
				if s.tags[sanitizeLabel(k)] != v {
					continue series
				}
			}
			hits = append(hits, hit{f, s})
		}
	}
	r.mu.Unlock()
	for _, h := range hits {
		fn(h.f, h.s)
	}
}

// get returns the series of name with tags, creating it. A name already in
// use by another kind of metric gives nil: Prometheus allows one type a
// name.
func (r *Registry) get(name string, k kind, tags map[string]string) *series {
	exposed := exposedName(sanitizeName(name), k)
	clean := make(map[string]string, len(tags))
	for key, v := range tags {
		clean[sanitizeLabel(key)] = v
	}
	labels := renderLabels(clean)

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.families == nil {
		r.families = map[string]*family{}
	}
	f := r.families[exposed]
	if f == nil {
		f = &family{name: exposed, kind: k, series: map[string]*series{}}
		f.help = r.help[sanitizeName(name)]
		r.families[exposed] = f
	}
	if f.kind != k {
		return nil
	}
	s := f.series[labels]
	if s == nil {
		s = &series{labels: labels, tags: clean}
		if k == histogramKind {
			s.buckets = make([]uint64, len(DefaultBuckets))
		}
		f.series[labels] = s
	}
	return s
}

// ServeHTTP writes the registry in the Prometheus text format.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", ContentType)
	_, _ = r.WriteTo(w) // a failed write means the scraper left
}

// WriteTo writes every metric in the Prometheus text format, families in
// name order and series in label order, so the output is stable.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	families := slices.Collect(maps.Values(r.families))
	derived := maps.Clone(r.derived)
	r.mu.Unlock()

	cw := &countingWriter{w: bufio.NewWriter(w)}
	for _, name := range slices.Sorted(maps.Keys(derived)) {
		d := derived[name]
		writeHeader(cw, name, gaugeKind, d.help)
		fmt.Fprintf(cw, "%s %s\n", name, formatFloat(d.fn()))
	}
	slices.SortFunc(families, func(a, b *family) int { return cmp.Compare(a.name, b.name) })
	for _, f := range families {
		if _, clash := derived[f.name]; clash {
			continue
		}
		r.mu.Lock()
		list := slices.Collect(maps.Values(f.series))
		help := f.help
		r.mu.Unlock()
		slices.SortFunc(list, func(a, b *series) int { return cmp.Compare(a.labels, b.labels) })
		writeHeader(cw, f.name, f.kind, help)
		for _, s := range list {
			writeSeries(cw, f, s)
		}
	}
	if err := cw.w.Flush(); err != nil && cw.err == nil {
		cw.err = err
	}
	return cw.n, cw.err
}

func writeHeader(w io.Writer, name string, k kind, help string) {
	if help != "" {
		fmt.Fprintf(w, "# HELP %s %s\n", name, helpEscaper.Replace(help))
	}
	fmt.Fprintf(w, "# TYPE %s %s\n", name, k)
}

func writeSeries(w io.Writer, f *family, s *series) {
	switch f.kind {
	case counterKind:
		fmt.Fprintf(w, "%s%s %d\n", f.name, braces(s.labels), s.count.Load())
	case gaugeKind:
		fmt.Fprintf(w, "%s%s %s\n", f.name, braces(s.labels), formatFloat(math.Float64frombits(s.bits.Load())))
	case histogramKind:
		s.mu.Lock()
		buckets, sum, total := slices.Clone(s.buckets), s.sum, s.total
		s.mu.Unlock()
		var cumulative uint64
		for i, bound := range DefaultBuckets {
			cumulative += buckets[i]
			fmt.Fprintf(w, "%s_bucket%s %d\n", f.name, braces(join(s.labels, `le="`+formatFloat(bound)+`"`)), cumulative)
		}
		fmt.Fprintf(w, "%s_bucket%s %d\n", f.name, braces(join(s.labels, `le="+Inf"`)), total)
		fmt.Fprintf(w, "%s_sum%s %s\n", f.name, braces(s.labels), formatFloat(sum))
		fmt.Fprintf(w, "%s_count%s %d\n", f.name, braces(s.labels), total)
	}
}

func (s *series) inc(d int64) {
	if s != nil && d > 0 { // a Prometheus counter never goes down
		s.count.Add(d)
	}
}

func (s *series) set(v float64) {
	if s != nil {
		s.bits.Store(math.Float64bits(v))
	}
}

func (s *series) observe(d time.Duration) {
	if s == nil {
		return
	}
	v := d.Seconds()
	i, _ := slices.BinarySearch(DefaultBuckets, v)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < len(s.buckets) {
		s.buckets[i]++
	}
	s.sum += v
	s.total++
}

// handler is the SDK's view of the registry: a set of tags that every
// metric made from it carries.
type handler struct {
	r    *Registry
	tags map[string]string
}

// WithTags returns a handler whose metrics carry h's tags and tags, the
// latter winning.
func (h handler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(h.tags)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, tags)
	return handler{r: h.r, tags: merged}
}

// Counter returns the counter name with h's tags.
func (h handler) Counter(name string) client.MetricsCounter {
	s := h.r.get(name, counterKind, h.tags)
	return counterFunc(s.inc)
}

// Gauge returns the gauge name with h's tags.
func (h handler) Gauge(name string) client.MetricsGauge {
	s := h.r.get(name, gaugeKind, h.tags)
	return gaugeFunc(s.set)
}

// Timer returns the timer name with h's tags, a histogram in seconds.
func (h handler) Timer(name string) client.MetricsTimer {
	s := h.r.get(name, histogramKind, h.tags)
	return timerFunc(s.observe)
}

type (
	counterFunc func(int64)
	gaugeFunc   func(float64)
	timerFunc   func(time.Duration)
)

func (f counterFunc) Inc(d int64)          { f(d) }
func (f gaugeFunc) Update(v float64)       { f(v) }
func (f timerFunc) Record(d time.Duration) { f(d) }

// braces wraps rendered labels in {}, or gives "" for none.
func braces(labels string) string {
	if labels == "" {
		return ""
	}
	return "{" + labels + "}"
}

// join adds one rendered label pair to rendered labels.
func join(labels, pair string) string {
	if labels == "" {
		return pair
	}
	return labels + "," + pair
}

// exposedName is name with the suffix Prometheus conventions give kind k.
func exposedName(name string, k kind) string {
	switch {
	case k == counterKind && !strings.HasSuffix(name, "_total"):
		return name + "_total"
	case k == histogramKind && !strings.HasSuffix(name, "_seconds"):
		return name + "_seconds"
	}
	return name
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.w.Write(p)
	w.n += int64(n)
	w.err = err
	return n, err
}

// countingWriter keeps the first error, so rendering goes on without
// checking every write.
type countingWriter struct {
	w   *bufio.Writer
	n   int64
	err error
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// formatFloat renders a sample value as Prometheus reads it.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// renderLabels renders tags sorted by key, values escaped.
func renderLabels(tags map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(tags)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(tags[k]))
		b.WriteByte('"')
	}
	return b.String()
}

// sanitizeName makes name a valid Prometheus metric name.
func sanitizeName(name string) string { return sanitize(name, true) }

// sanitizeLabel makes name a valid Prometheus label name.
func sanitizeLabel(name string) string { return sanitize(name, false) }

// sanitize replaces what a metric name (colons allowed) or a label name
// may not hold with underscores.
func sanitize(name string, colons bool) string {
	if name == "" {
		return "_"
	}
	b := []byte(name)
	for i, c := range b {
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			(i > 0 && c >= '0' && c <= '9') || (colons && c == ':')
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}
