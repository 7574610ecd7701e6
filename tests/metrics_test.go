package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// noPrometheus names why Debian's prometheus package (the server and
// promtool) is missing; without it the tests below fail.
const noPrometheus = "CYRNEL_TEST_NO_PROMETHEUS"

// prometheusTool returns the path of a program of Debian's prometheus
// package (prometheus, promtool).
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if why := os.Getenv(noPrometheus); why != "" {
		t.Skipf("no %s (%s: %s)", name, noPrometheus, why)
	}
	t.Fatalf("%s is required (apt-get install prometheus), or set %s=<why>", name, noPrometheus)
	return ""
}

// kit is the operator's Prometheus kit in the repository.
const kit = "../deploy/prometheus"

func runTool(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(prometheusTool(t, name), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPrometheusKit: promtool accepts the scrape configuration, the alert
// rules, and the rules' unit tests (each alert fires on the series that
// should raise it).
func TestPrometheusKit(t *testing.T) {
	t.Parallel()
	// The configuration names its key file beside it; promtool checks it
	// exists, so the check runs on a copy with one.
	dir := t.TempDir()
	for _, f := range []string{"prometheus.yml", "alerts.yml", "alerts_test.yml"} {
		b, err := os.ReadFile(filepath.Join(kit, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cyrnel-api-key"), []byte("key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := runTool(t, dir, "promtool", "check", "config", "prometheus.yml"); !strings.Contains(out, "SUCCESS: 6 rules found") {
		t.Errorf("check config: %s", out)
	}
	if out := runTool(t, dir, "promtool", "check", "rules", "alerts.yml"); !strings.Contains(out, "SUCCESS") {
		t.Errorf("check rules: %s", out)
	}
	if out := runTool(t, dir, "promtool", "test", "rules", "alerts_test.yml"); !strings.Contains(out, "SUCCESS") {
		t.Errorf("test rules: %s", out)
	}
}

var metricsListening = regexp.MustCompile(`msg="metrics listening" addr=(\S+)`)

// scrape reads GET /metrics, with the key when one is given.
func scrape(t *testing.T, u, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// freeAddr is a loopback address nothing listens on (for a program that
// cannot be told to pick its own port and say it).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestPrometheusScrapesHost: Debian's Prometheus server scrapes a running
// host both ways (the API's listener with the key, --metrics-addr without),
// and a query through its HTTP API finds the executions the test ran, by
// exit state. promtool accepts the exposition.
func TestPrometheusScrapesHost(t *testing.T) {
	t.Parallel()
	server := prometheusTool(t, "prometheus")
	h := start(t, "", "CYRNEL_API_KEY=metrics-key", "CYRNEL_METRICS_ADDR=127.0.0.1:0")
	m := metricsListening.FindStringSubmatch(h.logs.String())
	if m == nil {
		t.Fatalf("no metrics listener in the log:\n%s", h.logs.String())
	}
	metricsAddr := m[1]

	// The API's /metrics wants an admin key; the metrics listener none.
	if st, _ := scrape(t, h.base+"/metrics", ""); st != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without a key: %d", st)
	}
	var runner struct {
		Key string `json:"key"`
	}
	if st, _ := h.do("POST", "/keys", map[string]any{"name": "agent", "roles": []string{"runner"}}, &runner); st != http.StatusCreated {
		t.Fatalf("create a runner key: %d", st)
	}
	if st, _ := scrape(t, h.base+"/metrics", runner.Key); st != http.StatusForbidden {
		t.Fatalf("GET /metrics with a runner key: %d", st)
	}
	for i := range 3 {
		if p := h.run(fmt.Sprintf("print(%d)", i), nil); p.exit() != "success" {
			t.Fatalf("run %d: %+v", i, p)
		}
	}
	for range 2 {
		if p := h.run("raise ValueError('no')", nil); p.exit() != "failed" || p.reason() != "exception" {
			t.Fatalf("failing run: %+v", p)
		}
	}
	st, exposition := scrape(t, "http://"+metricsAddr+"/metrics", "")
	if st != http.StatusOK || !strings.Contains(exposition, `cyrnel_executions_total{environment="python",exit_state="success",reason="completed"} 3`) {
		t.Fatalf("metrics listener: %d\n%s", st, exposition)
	}
	promtool := exec.Command(prometheusTool(t, "promtool"), "check", "metrics")
	promtool.Stdin = strings.NewReader(exposition)
	if out, err := promtool.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte(h.key), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s}
scrape_configs:
  - job_name: cyrnel
    authorization: {credentials_file: %s}
    static_configs: [{targets: [%q]}]
  - job_name: cyrnel-metrics
    static_configs: [{targets: [%q]}]
`, filepath.Join(dir, "key"), strings.TrimPrefix(h.base, "http://"), metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	web := freeAddr(t)
	prom := exec.Command(server, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	var promLog syncBuffer
	promLog.mu = make(chan struct{}, 1)
	prom.Stdout, prom.Stderr = &promLog, &promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		prom.Process.Kill()
		prom.Wait()
	})

	// Prometheus answers once it has scraped both targets (1 s apart); the
	// poll is bounded, and each round asks its query API afresh.
	want := map[string]map[string]string{
		"cyrnel":         {"success": "3", "failed": "2"},
		"cyrnel-metrics": {"success": "3", "failed": "2"},
	}
	var got map[string]map[string]string
	deadline := time.Now().Add(60 * time.Second)
	for {
		got = queryByExitState(t, "http://"+web)
		if fmt.Sprint(got) == fmt.Sprint(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Prometheus has %v, want %v\nprometheus log:\n%s", got, want, promLog.String())
	}
}

// queryByExitState asks Prometheus for the executions by job and exit
// state (nil while it cannot answer yet).
func queryByExitState(t *testing.T, prom string) map[string]map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := url.Values{"query": {"sum by (job, exit_state) (cyrnel_executions_total)"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, prom+"/api/v1/query?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil // not listening yet
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		return nil
	}
	out := map[string]map[string]string{}
	for _, r := range body.Data.Result {
		job := r.Metric["job"]
		if out[job] == nil {
			out[job] = map[string]string{}
		}
		out[job][r.Metric["exit_state"]], _ = r.Value[1].(string)
	}
	return out
}

// TestScaleOutMetrics: on PostgreSQL a host counts the hosts alive (one
// fewer once a host is killed and its lease runs out) and how late the
// others' notifications arrive.
func TestScaleOutMetrics(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	hs := startCluster(t, 2, "CYRNEL_LEASE_TTL="+ttl.String())
	a, b := hs[0], hs[1]
	value := func(name string) string {
		_, body := scrape(t, b.base+"/metrics", b.key)
		for line := range strings.Lines(body) {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	// Polls of the host's own gauges, bounded; what changes them is the
	// lease's clock, not the test's.
	until := func(what string, bound time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(bound)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, bound)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	until("two hosts alive", 2*ttl, func() bool { return value("cyrnel_hosts_alive") == "2" })
	if st, _ := a.do("POST", "/services", map[string]any{
		"id": "petstore", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "swagger-petstore-3.0.yaml")},
		"config": map[string]any{"serverUrl": "http://127.0.0.1:1"},
	}, nil); st != http.StatusCreated {
		t.Fatalf("import through a: %d", st)
	}
	until("b hears a's notification", 5*time.Second, func() bool {
		n := value("cyrnel_cluster_notification_lag_seconds_count")
		return n != "" && n != "0"
	})
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	until("one host alive after a is killed", 2*ttl+2*time.Second, func() bool { return value("cyrnel_hosts_alive") == "1" })
}

// TestMetricsFamilies: a running host exposes every family of DESIGN §13
// and docs/operating.md with the values of what the test did: executions by
// environment, exit state and reason with their duration and queue wait
// (buckets from 1 ms to 30 s), live executions, warm workers and template
// restarts, sessions by state, tool calls by service, tool and outcome with
// their duration, approvals pending, HTTP requests by route template, the
// process-row writer's batches, and the Go and process collectors.
func TestMetricsFamilies(t *testing.T) {
	t.Parallel()
	h, _ := governed(t, "")
	setPolicies(t, h, "allow", [2]string{"petstore.getPetById", "ask"})
	if p := h.run("cyrnel.services.petstore.findPetsByStatus(status='available')", nil); p.exit() != "success" {
		t.Fatalf("tool call from code: %+v", p)
	}
	h.newSession(map[string]any{})
	pid, a := approvalOf(t, h, "cyrnel.services.petstore.getPetById(petId=1)", 0)
	h.do("GET", "/processes/999999", nil, nil) // 404

	m := gather(t, h)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cyrnel_executions_total", map[string]string{"environment": "python", "exit_state": "success", "reason": "completed"}, 1},
		{"cyrnel_executions", map[string]string{"state": "suspended"}, 1},
		{"cyrnel_template_restarts_total", map[string]string{"environment": "python"}, 0},
		{"cyrnel_sessions", map[string]string{"state": "ready"}, 1},
		{"cyrnel_tool_calls_total", map[string]string{"service": "petstore", "tool": "findPetsByStatus", "outcome": "success"}, 1},
		{"cyrnel_approvals_pending", nil, 1},
		{"cyrnel_http_requests_total", map[string]string{"route": "/processes/{pid}", "code": "404"}, 1},
	} {
		if got := m.value(c.name, c.labels); got != c.want {
			t.Errorf("%s %v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"cyrnel_execution_duration_seconds", map[string]string{"environment": "python"}},
		{"cyrnel_execution_queue_seconds", map[string]string{"environment": "python"}},
		{"cyrnel_tool_call_duration_seconds", map[string]string{"service": "petstore", "tool": "findPetsByStatus"}},
	} {
		hist := m.histogram(c.name, c.labels)
		if hist.GetSampleCount() != 1 {
			t.Errorf("%s %v: %d samples, want 1", c.name, c.labels, hist.GetSampleCount())
		}
		// The executions' buckets tell a 1 ms fork from a 30 s program.
		if b := hist.GetBucket(); strings.HasPrefix(c.name, "cyrnel_execution") &&
			(len(b) == 0 || b[0].GetUpperBound() > .001 || b[len(b)-1].GetUpperBound() < 30) {
			t.Errorf("%s: buckets %v do not reach from 1 ms to 30 s", c.name, b)
		}
	}
	for _, name := range []string{"cyrnel_process_write_batch_size", "cyrnel_process_write_seconds", "cyrnel_http_request_duration_seconds"} {
		if n := m.histogram(name, nil).GetSampleCount(); n == 0 {
			t.Errorf("%s: no samples", name)
		}
	}
	for _, state := range []string{"ready", "starting", "busy"} {
		if !m.has("cyrnel_workers", map[string]string{"environment": "python", "state": state}) {
			t.Errorf("no cyrnel_workers{environment=python,state=%s}", state)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !m.has(name, nil) {
			t.Errorf("no %s (the Go and process collectors)", name)
		}
	}
	for _, s := range m["cyrnel_http_requests_total"].GetMetric() {
		if route := label(s, "route"); strings.ContainsAny(route, "0123456789") {
			t.Errorf("a route label carries a path: %s", route)
		}
	}

	if st, _ := reviewer(h).do("POST", "/approvals/"+a.ID+"/approve", nil, nil); st != http.StatusOK {
		t.Fatalf("approve: %d", st)
	}
	h.wait(pid)
	m = gather(t, h)
	if got := m.value("cyrnel_approvals_pending", nil); got != 0 {
		t.Errorf("cyrnel_approvals_pending after the decision = %v", got)
	}
	if got := m.value("cyrnel_tool_calls_total", map[string]string{"service": "petstore", "tool": "getPetById", "outcome": "success"}); got != 1 {
		t.Errorf("the approved call counted %v times", got)
	}
}

// families is a scrape, parsed.
type families map[string]*dto.MetricFamily

// gather scrapes the host's GET /metrics with its key and parses it.
func gather(t *testing.T, h *host) families {
	t.Helper()
	st, body := scrape(t, h.base+"/metrics", h.key)
	if st != http.StatusOK {
		t.Fatalf("GET /metrics: %d", st)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// find is the series of family name whose labels include labels.
func (f families) find(name string, labels map[string]string) *dto.Metric {
next:
	for _, m := range f[name].GetMetric() {
		for k, v := range labels {
			if label(m, k) != v {
				continue next
			}
		}
		return m
	}
	return nil
}

func (f families) has(name string, labels map[string]string) bool {
	return f.find(name, labels) != nil
}

// value is a counter's or gauge's value (-1: no such series).
func (f families) value(name string, labels map[string]string) float64 {
	m := f.find(name, labels)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	default:
		return m.GetGauge().GetValue()
	}
}

func (f families) histogram(name string, labels map[string]string) *dto.Histogram {
	return f.find(name, labels).GetHistogram()
}
