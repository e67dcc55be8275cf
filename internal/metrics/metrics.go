// Package metrics builds the registry behind the worker's GET /metrics. The
// Temporal SDK's metrics, and those workflow code emits through
// workflow.GetMetricsHandler, reach it through the SDK's OpenTelemetry
// metrics handler and the OpenTelemetry Prometheus exporter; the Go
// runtime's and the process's collectors sit beside them.
//
// The exporter follows Prometheus naming: a counter's name ends in _total,
// a timer (which the handler records in seconds) is a histogram whose name
// ends in _seconds, and any character Prometheus does not allow becomes an
// underscore. A name that already ends in _total or _seconds keeps it once
// (and a counter's "total" inside its name moves to the end).
package metrics

import (
	"context"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/opentelemetry"
)

// Buckets are the upper bounds, in seconds, of every timer's histogram. They
// reach from a fast activity (5 ms) to a person who answers an approval a
// day later.
var Buckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
	60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600,
}

// meterName names the instrumentation scope of what the SDK records.
const meterName = "go.temporal.io/sdk"

// Registry is what a worker's GET /metrics serves: what the SDK handler
// recorded, the Go and process collectors, and gauges added with GaugeFunc.
// It is a prometheus.Gatherer and an http.Handler.
type Registry struct {
	provider *sdkmetric.MeterProvider
	handler  client.MetricsHandler
	// recorded holds the exporter alone, so that a gauge in own can read
	// it (Sum) while own is being gathered: a registry that gathered
	// itself from inside one of its collectors would never finish.
	recorded *prometheus.Registry
	own      *prometheus.Registry
	gatherer prometheus.Gatherers
	http     http.Handler
}

// New returns an empty registry. help gives metrics their help text, by the
// name the SDK handler is asked for.
func New(help map[string]string) (*Registry, error) {
	r := &Registry{recorded: prometheus.NewRegistry(), own: prometheus.NewRegistry()}
	exporter, err := otelprometheus.New(
		otelprometheus.WithRegisterer(r.recorded),
		otelprometheus.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// A worker's series carry the SDK's tags and no others.
		otelprometheus.WithoutScopeInfo(),
		otelprometheus.WithoutTargetInfo(),
		otelprometheus.WithAggregationSelector(func(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
			if k == sdkmetric.InstrumentKindHistogram {
				return sdkmetric.AggregationExplicitBucketHistogram{Boundaries: Buckets}
			}
			return sdkmetric.DefaultAggregationSelector(k)
		}),
	)
	if err != nil {
		return nil, err
	}
	r.provider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(describe(help)))
	r.handler = newCached(opentelemetry.NewMetricsHandler(opentelemetry.MetricsHandlerOptions{
		Meter: r.provider.Meter(meterName),
		// The SDK documents its counters as never going down: Prometheus
		// counters, not gauges.
		UseMonotonicCounters: true,
		// A name the meter refuses is reported (otel.Handle logs it), not
		// a panic in a worker.
		OnError: otel.Handle,
	}))
	r.own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.gatherer = prometheus.Gatherers{r.recorded, r.own}
	r.http = promhttp.HandlerFor(r.gatherer, promhttp.HandlerOpts{})
	return r, nil
}

// describe is a view that gives each instrument its help text: help's, else
// for the SDK's own metrics a pointer to Temporal's reference of them. The
// SDK names its metrics to the handler without describing them, and a
// family without help text fails Prometheus's lint. One view, not one per
// name: two views that match an instrument would export it twice.
func describe(help map[string]string) sdkmetric.View {
	return func(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
		text, ok := help[i.Name]
		if !ok && strings.HasPrefix(i.Name, sdkPrefix) {
			text, ok = sdkHelp, true
		}
		if !ok {
			return sdkmetric.Stream{}, false
		}
		return sdkmetric.Stream{Name: i.Name, Description: text, Unit: i.Unit}, true
	}
}

// The SDK's metric names begin with sdkPrefix; sdkHelp is their help text.
const (
	sdkPrefix = "temporal_"
	sdkHelp   = "A Temporal Go SDK metric: https://docs.temporal.io/references/sdk-metrics"
)

// Handler returns the registry as the SDK's metrics handler, for
// client.Options and testsuite.WorkflowTestSuite.
func (r *Registry) Handler() client.MetricsHandler { return r.handler }

// GaugeFunc adds a gauge whose value fn computes at every scrape; fn may
// call Sum. Like prometheus.MustRegister, it panics if name is taken.
func (r *Registry) GaugeFunc(name, help string, fn func() float64) {
	r.own.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

// Gather gathers every metric, as prometheus.Gatherer does.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) { return r.gatherer.Gather() }

// ServeHTTP serves the metrics in the format the scraper asks for.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.http.ServeHTTP(w, req) }

// Close shuts the meter provider down: the handler records nothing after
// it.
func (r *Registry) Close(ctx context.Context) error { return r.provider.Shutdown(ctx) }

// Sum adds up the series of the counter or gauge that the SDK handler
// recorded under the exposed name (with its _total), over those whose
// labels include every pair in match (nil matches all).
func (r *Registry) Sum(name string, match map[string]string) float64 {
	var total float64
	for _, m := range r.series(name, match) {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}

// Count adds up how many durations the timer that the SDK handler recorded
// under the exposed name (with its _seconds) counted, over the series whose
// labels include every pair in match.
func (r *Registry) Count(name string, match map[string]string) uint64 {
	var total uint64
	for _, m := range r.series(name, match) {
		total += m.GetHistogram().GetSampleCount()
	}
	return total
}

// series returns the recorded series of name whose labels include match.
// A failed gather yields what it could gather: the exporter reports its
// own errors through otel.Handle.
func (r *Registry) series(name string, match map[string]string) []*dto.Metric {
	families, _ := r.recorded.Gather()
	var found []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue series
				}
			}
			found = append(found, m)
		}
	}
	return found
}
