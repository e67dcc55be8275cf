// Package spantest lets tests read the spans tollgate makes: an OTLP/HTTP
// receiver that decodes what an exporter sends it, and one view of spans,
// whether they came from it or from the SDK's in-memory exporter, to follow
// a trace from span to parent.
package spantest

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is what a test reads of one span.
type Span struct {
	// Service is the service.name of the process that made it.
	Service string
	Name    string
	// TraceID, SpanID and ParentID are in hex; ParentID is "" for a root.
	TraceID, SpanID, ParentID string
	// Attributes hold every attribute as text (a bool is "true").
	Attributes map[string]string
	// Links are the span ids of the spans it links to.
	Links      []string
	Start, End time.Time
}

// Spans are spans of one or more traces, in the order they were exported.
type Spans []Span

// Named are the spans called name.
func (s Spans) Named(name string) Spans {
	var out Spans
	for _, sp := range s {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

// InTrace are the spans of trace traceID.
func (s Spans) InTrace(traceID string) Spans {
	var out Spans
	for _, sp := range s {
		if sp.TraceID == traceID {
			out = append(out, sp)
		}
	}
	return out
}

// ByID is the span with id spanID.
func (s Spans) ByID(spanID string) (Span, bool) {
	i := slices.IndexFunc(s, func(sp Span) bool { return sp.SpanID == spanID })
	if i < 0 {
		return Span{}, false
	}
	return s[i], true
}

// Ancestry names sp's parent, its parent's parent and so on, up to the
// root, or up to a parent that is not among s ("?" then ends the list).
func (s Spans) Ancestry(sp Span) []string {
	var names []string
	for sp.ParentID != "" {
		parent, ok := s.ByID(sp.ParentID)
		if !ok {
			return append(names, "?")
		}
		names = append(names, parent.Name)
		sp = parent
	}
	return names
}

// Names lists the names of s, for a failure's message.
func (s Spans) Names() []string {
	out := make([]string, len(s))
	for i, sp := range s {
		out[i] = sp.Name
	}
	return out
}

// FromStubs reads the spans of the SDK's in-memory exporter.
func FromStubs(stubs tracetest.SpanStubs) Spans {
	out := make(Spans, 0, len(stubs))
	for _, st := range stubs {
		sp := Span{
			Name:       st.Name,
			TraceID:    st.SpanContext.TraceID().String(),
			SpanID:     st.SpanContext.SpanID().String(),
			Attributes: map[string]string{},
			Start:      st.StartTime,
			End:        st.EndTime,
		}
		if st.Parent.IsValid() {
			sp.ParentID = st.Parent.SpanID().String()
		}
		if st.Resource != nil {
			if v, ok := st.Resource.Set().Value(semconv.ServiceNameKey); ok {
				sp.Service = v.AsString()
			}
		}
		for _, kv := range st.Attributes {
			sp.Attributes[string(kv.Key)] = kv.Value.String()
		}
		for _, l := range st.Links {
			sp.Links = append(sp.Links, l.SpanContext.SpanID().String())
		}
		out = append(out, sp)
	}
	return out
}

// Receiver is an OTLP/HTTP trace receiver, as a collector serves it: it
// takes POST /v1/traces with an ExportTraceServiceRequest in protobuf
// (gzipped or not) and keeps the spans.
type Receiver struct {
	// URL is the receiver's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	mu       sync.Mutex
	spans    Spans
	requests int
}

// NewReceiver starts a receiver on loopback; it stops with the test.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.export)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Spans are the spans received so far.
func (r *Receiver) Spans() Spans {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Requests counts the export requests received so far.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func (r *Receiver) export(w http.ResponseWriter, req *http.Request) {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct+" is not application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, "decode ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	spans := decode(&msg)
	r.mu.Lock()
	r.spans = append(r.spans, spans...)
	r.requests++
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

func decode(msg *coltracepb.ExportTraceServiceRequest) Spans {
	var out Spans
	for _, rs := range msg.GetResourceSpans() {
		service := attributes(rs.GetResource().GetAttributes())[string(semconv.ServiceNameKey)]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service:    service,
					Name:       s.GetName(),
					TraceID:    hex.EncodeToString(s.GetTraceId()),
					SpanID:     hex.EncodeToString(s.GetSpanId()),
					ParentID:   hex.EncodeToString(s.GetParentSpanId()),
					Attributes: attributes(s.GetAttributes()),
					Start:      time.Unix(0, int64(s.GetStartTimeUnixNano())),
					End:        time.Unix(0, int64(s.GetEndTimeUnixNano())),
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetSpanId()))
				}
				out = append(out, sp)
			}
		}
	}
	return out
}

func attributes(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = strconv.FormatBool(v.GetBoolValue())
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		default:
			out[kv.GetKey()] = fmt.Sprint(v)
		}
	}
	return out
}
