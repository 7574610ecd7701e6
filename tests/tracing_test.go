package tests

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP trace receiver on loopback: it decodes what the
// host exports with the OpenTelemetry protobuf types.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	more  chan struct{} // a signal per export
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{more: make(chan struct{}, 1)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		select {
		case r.more <- struct{}{}:
		default:
		}
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	}))
	t.Cleanup(r.Close)
	return r
}

// waitSpans waits (30 s at most) until every name in names has a span in
// the trace, and returns that trace's spans by name.
func (r *receiver) waitSpans(t *testing.T, traceID []byte, names ...string) map[string][]*tracepb.Span {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		byName := map[string][]*tracepb.Span{}
		for _, s := range r.spans {
			if bytes.Equal(s.TraceId, traceID) {
				byName[s.Name] = append(byName[s.Name], s)
			}
		}
		r.mu.Unlock()
		missing := []string{}
		for _, n := range names {
			if len(byName[n]) == 0 {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return byName
		}
		select {
		case <-r.more:
		case <-deadline:
			t.Fatalf("spans %v never arrived in trace %x; have %v", missing, traceID, keys(byName))
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestTraceThroughToolCall: a caller's traceparent on POST /processes
// continues its trace through the request, the execution, the program's
// tool call and on to the upstream, which receives the same trace id; the
// host exports every span of it over OTLP/HTTP, and the process shows the
// trace id.
func TestTraceThroughToolCall(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	up := newUpstream(t)
	h := start(t, "", "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
	if st, _ := h.do("POST", "/services", map[string]any{
		"id": "petstore", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "swagger-petstore-3.0.yaml")},
		"config": map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true},
	}, nil); st != http.StatusCreated {
		t.Fatalf("import: %d", st)
	}

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	st, p := postTraced(t, h, map[string]any{"code": "cyrnel.output({'r': cyrnel.services.petstore.getPetById(petId=7)})", "waitMs": 60000},
		"00-"+traceID+"-"+parentID+"-01")
	if st != http.StatusCreated || p.exit() != "success" {
		t.Fatalf("run: %d %+v", st, p)
	}
	if p.TraceID != traceID {
		t.Errorf("process traceId %q, want the caller's %s", p.TraceID, traceID)
	}
	var got struct {
		TraceID string `json:"traceId"`
	}
	if h.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &got); got.TraceID != traceID {
		t.Errorf("stored traceId %q, want %s", got.TraceID, traceID)
	}
	sent := up.last(t).Header.Get("traceparent")
	if parts := strings.Split(sent, "-"); len(parts) != 4 || parts[1] != traceID {
		t.Fatalf("upstream got traceparent %q, want trace %s", sent, traceID)
	}

	id, _ := hex.DecodeString(traceID)
	spans := rcv.waitSpans(t, id, "POST /processes", "execution", "execution.queue", "execution.start", "execution.run",
		"db.process.insert", "db.process.finish", "tool.call", "HTTP GET")
	one := func(name string) *tracepb.Span { return onlySpan(t, spans, name) }
	request, execution, call, client := one("POST /processes"), one("execution"), one("tool.call"), one("HTTP GET")
	if hex.EncodeToString(request.ParentSpanId) != parentID || request.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("request span: parent %x kind %v, want the caller's %s, server", request.ParentSpanId, request.Kind, parentID)
	}
	for child, parent := range map[string]*tracepb.Span{
		"execution": request, "execution.queue": execution, "execution.start": execution, "execution.run": execution, "db.process.insert": execution,
		"db.process.finish": execution, "tool.call": execution, "HTTP GET": call,
	} {
		if s := one(child); !bytes.Equal(s.ParentSpanId, parent.SpanId) {
			t.Errorf("%s: parent %x, want %s (%x)", child, s.ParentSpanId, parent.Name, parent.SpanId)
		}
	}
	// Taking (or forking) the worker is part of the queue wait, before the run.
	if queue, started, run := one("execution.queue"), one("execution.start"), one("execution.run"); started.StartTimeUnixNano < queue.StartTimeUnixNano ||
		started.EndTimeUnixNano > queue.EndTimeUnixNano || started.EndTimeUnixNano > run.StartTimeUnixNano {
		t.Errorf("execution.start %d–%d is not within execution.queue %d–%d before execution.run %d", started.StartTimeUnixNano, started.EndTimeUnixNano,
			queue.StartTimeUnixNano, queue.EndTimeUnixNano, run.StartTimeUnixNano)
	}
	// The upstream's traceparent names the client span as its parent.
	if parts := strings.Split(sent, "-"); parts[2] != hex.EncodeToString(client.SpanId) {
		t.Errorf("upstream parent %s, want the client span %x", parts[2], client.SpanId)
	}
	if client.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("upstream call span kind %v, want client", client.Kind)
	}
}

// tracedProc is a process as POST /processes answers, with its trace.
type tracedProc struct {
	proc
	TraceID string `json:"traceId"`
}

// postTraced is POST /processes with a traceparent header.
func postTraced(t *testing.T, h *host, body map[string]any, traceparent string) (int, tracedProc) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, h.base+"/processes", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.key)
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p tracedProc
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatalf("POST /processes: %d: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, p
}

// onlySpan is the one span named name.
func onlySpan(t *testing.T, spans map[string][]*tracepb.Span, name string) *tracepb.Span {
	t.Helper()
	if n := len(spans[name]); n != 1 {
		t.Fatalf("%d spans %q, want 1", n, name)
	}
	return spans[name][0]
}

// attr is the string attribute key of span s ("" without one).
func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestTraceOfAnApprovalWait: a program's tool call that waits on a human
// shows the wait as approval.wait, a child of the call's span, naming the
// approval and its decision; the upstream request, made once approved,
// follows the wait in the same trace, which the upstream receives.
func TestTraceOfAnApprovalWait(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	h, up := governed(t, "", "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
	setPolicies(t, h, "allow", [2]string{"petstore.getPetById", "ask"})
	const traceID = "6bf92f3577b34da6a3ce929d0e0e4738"
	st, p := postTraced(t, h, map[string]any{"code": "cyrnel.output({'r': cyrnel.services.petstore.getPetById(petId=7)})"},
		"00-"+traceID+"-00f067aa0ba902b9-01")
	if st != http.StatusCreated {
		t.Fatalf("start: %d %+v", st, p)
	}
	a := suspendedOn(t, h, p.PID)
	if st, _ := reviewer(h).do("POST", "/approvals/"+a.ID+"/approve", nil, nil); st != http.StatusOK {
		t.Fatalf("approve: %d", st)
	}
	if p := h.wait(p.PID); p.exit() != "success" {
		t.Fatalf("approved process: %+v", p)
	}
	if parts := strings.Split(up.last(t).Header.Get("traceparent"), "-"); len(parts) != 4 || parts[1] != traceID {
		t.Errorf("upstream got traceparent %v, want trace %s", parts, traceID)
	}
	id, _ := hex.DecodeString(traceID)
	spans := rcv.waitSpans(t, id, "execution", "tool.call", "approval.wait", "HTTP GET")
	execution, call := onlySpan(t, spans, "execution"), onlySpan(t, spans, "tool.call")
	wait, client := onlySpan(t, spans, "approval.wait"), onlySpan(t, spans, "HTTP GET")
	if !bytes.Equal(call.ParentSpanId, execution.SpanId) || !bytes.Equal(wait.ParentSpanId, call.SpanId) || !bytes.Equal(client.ParentSpanId, call.SpanId) {
		t.Errorf("parents: tool.call %x (execution %x), approval.wait %x and HTTP GET %x (tool.call %x)",
			call.ParentSpanId, execution.SpanId, wait.ParentSpanId, client.ParentSpanId, call.SpanId)
	}
	if attr(wait, "cyrnel.approval") != a.ID || attr(wait, "cyrnel.approval_state") != "approved" {
		t.Errorf("approval.wait attributes %v, want approval %s approved", wait.Attributes, a.ID)
	}
	if wait.EndTimeUnixNano > client.StartTimeUnixNano {
		t.Errorf("the upstream request began before the approval wait ended")
	}
}

// TestTracingOffByDefault: without OTEL_* variables the host traces
// nothing: a caller's traceparent is not continued, the process shows no
// traceId and the upstream receives no traceparent.
func TestTracingOffByDefault(t *testing.T) {
	t.Parallel()
	h, up := governed(t, "")
	st, p := postTraced(t, h, map[string]any{"code": "cyrnel.services.petstore.getPetById(petId=7)", "waitMs": 60000},
		"00-8bf92f3577b34da6a3ce929d0e0e473a-00f067aa0ba902bb-01")
	if st != http.StatusCreated || p.exit() != "success" {
		t.Fatalf("run: %d %+v", st, p)
	}
	if p.TraceID != "" {
		t.Errorf("process traceId %q with tracing off", p.TraceID)
	}
	if tp := up.last(t).Header.Get("traceparent"); tp != "" {
		t.Errorf("upstream got traceparent %q with tracing off", tp)
	}
}

// traceparentHeader sends a traceparent with every request of an MCP
// client, as an instrumented agent does.
type traceparentHeader struct {
	value string
	next  http.RoundTripper
}

func (t traceparentHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("traceparent", t.value)
	return t.next.RoundTrip(r)
}

// TestTraceThroughMCP: a traceparent on the MCP request continues the
// caller's trace into the execution run_code starts.
func TestTraceThroughMCP(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	h := start(t, "", "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	c := mcp.NewClient(&mcp.Implementation{Name: "cyrnel-e2e", Version: "1"}, nil)
	s, err := c.Connect(deadline(t), &mcp.StreamableClientTransport{
		Endpoint:   h.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{h.key, traceparentHeader{"00-" + traceID + "-b7ad6b7169203331-01", http.DefaultTransport}}},
	}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer s.Close()
	res := structured[runResult](t, call(t, s, "run_code", map[string]any{"code": "print('hi')"}))
	if res.ExitState != "success" {
		t.Fatalf("run_code: %+v", res)
	}
	var p struct {
		TraceID string `json:"traceId"`
	}
	if h.do("GET", fmt.Sprintf("/processes/%d", res.PID), nil, &p); p.TraceID != traceID {
		t.Errorf("process traceId %q, want the MCP caller's %s", p.TraceID, traceID)
	}
	id, _ := hex.DecodeString(traceID)
	spans := rcv.waitSpans(t, id, "POST /mcp", "execution")
	parent := spans["execution"][0].ParentSpanId
	if !slices.ContainsFunc(spans["POST /mcp"], func(s *tracepb.Span) bool { return bytes.Equal(s.SpanId, parent) }) {
		t.Errorf("execution's parent %x is not an MCP request span", parent)
	}
}

// TestTraceOfAConfigurationWrite: a configuration change made under a
// caller's trace shows its database statements as children of the
// request's span (bunotel on the store), not only the process rows' writes.
func TestTraceOfAConfigurationWrite(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	h := start(t, "", "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
	const traceID, parentID = "5bf92f3577b34da6a3ce929d0e0e4737", "00f067aa0ba902b8"
	body := strings.NewReader(`{"default": "allow", "rules": [{"pattern": "pets.*", "decision": "block"}]}`)
	req, _ := http.NewRequest("PUT", h.base+"/tool-policies", body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.key)
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("set policies: %d", resp.StatusCode)
	}
	id, _ := hex.DecodeString(traceID)
	spans := rcv.waitSpans(t, id, "PUT /tool-policies", "INSERT")
	request := spans["PUT /tool-policies"][0]
	for _, s := range spans["INSERT"] {
		if !bytes.Equal(s.ParentSpanId, request.SpanId) {
			t.Errorf("INSERT span's parent %x, want the request's %x", s.ParentSpanId, request.SpanId)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("INSERT span kind %v, want client", s.Kind)
		}
	}
}
