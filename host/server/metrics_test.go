package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/gate"
)

// series counts the series of each cyrnel_ family the host exposes, and
// returns every label value seen.
func series(t *testing.T, s *Server) (map[string]int, map[string]bool) {
	t.Helper()
	families, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts, values := map[string]int{}, map[string]bool{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "cyrnel_") {
			continue
		}
		counts[f.GetName()] = len(f.Metric)
		for _, m := range f.Metric {
			for _, l := range m.Label {
				values[l.GetValue()] = true
			}
		}
	}
	return counts, values
}

func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// hits is the value of a counter series with the given labels.
func hits(t *testing.T, s *Server, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return counterOf(m)
		}
	}
	return 0
}

func counterOf(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return 0
}

// TestMetricsCardinalityBounded: thousands of processes, requests to
// random paths and pids, tool calls to random services and tools, and
// services with random names come and go; the series stay as many as the
// routes and configured tools, no random name becomes a label value, and a
// deleted service's series go.
func TestMetricsCardinalityBounded(t *testing.T) {
	t.Parallel()
	h := startHost(t, t.TempDir())
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":1}`))
	}))
	t.Cleanup(up.Close)
	doc, err := os.ReadFile("testdata/petstore-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// A first round of every kind of request, to know the series they make.
	load := func(n int) []string {
		var mu sync.Mutex
		var names []string
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < n; i += 4 {
					name := strings.ToLower(rand.Text())
					mu.Lock()
					names = append(names, name)
					mu.Unlock()
					var p struct {
						PID int64 `json:"pid"`
					}
					if st := h.call("POST", "/processes", map[string]any{"code": "pass", "ref": name, "autorun": false}, &p); st != http.StatusCreated {
						t.Errorf("create: %d", st)
						return
					}
					h.call("GET", fmt.Sprintf("/processes/%d", p.PID), nil, nil)
					h.call("GET", fmt.Sprintf("/processes/%d", 1_000_000+i), nil, nil) // 404
					h.call("GET", "/"+name+"/"+name, nil, nil)                         // no such route
					h.call("POST", "/tools/"+name+"/"+name+"/invoke", map[string]any{"parameters": map[string]any{}}, nil)
					h.call("POST", "/tools/pets/"+name+"/invoke", map[string]any{"parameters": map[string]any{}}, nil)
					// The API refuses unknown tools before the gate; a
					// program's calls reach it with any names.
					for _, svc := range []string{name, "pets"} {
						if _, err := h.s.gate.Invoke(context.Background(), gate.FromCode, module.InvokeInput{ServiceID: svc, ToolID: name, Parameters: map[string]any{}}); err == nil {
							t.Errorf("call to %s.%s succeeded", svc, name)
						}
					}
					req, _ := http.NewRequest("GET", h.url+"/processes/"+name, nil) // no key: 401
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				}
			})
		}
		wg.Wait()
		return names
	}
	// Services with random names, each with tools called, then deleted.
	services := func(n int) []string {
		var ids []string
		for range n {
			id := "s" + strings.ToLower(rand.Text())[:12]
			ids = append(ids, id)
			if st := h.call("POST", "/services", map[string]any{"id": id, "adapter": "openapi", "source": map[string]any{"content": string(doc)},
				"config": map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true}}, nil); st != http.StatusCreated {
				t.Fatalf("create service %s: %d", id, st)
			}
			if st := h.call("POST", "/tools/"+id+"/showPetById/invoke", map[string]any{"parameters": map[string]any{"petId": "1"}}, nil); st != http.StatusOK {
				t.Fatalf("invoke %s.showPetById: %d", id, st)
			}
		}
		return ids
	}
	if st := h.call("POST", "/services", map[string]any{"id": "pets", "adapter": "openapi", "source": map[string]any{"content": string(doc)},
		"config": map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true}}, nil); st != http.StatusCreated {
		t.Fatalf("create pets: %d", st)
	}
	load(8)
	first, _ := series(t, h.s)

	names := load(2500)
	ids := services(20)
	counts, values := series(t, h.s)
	// Each service adds its tool's call series (one outcome) and duration.
	if got := counts["cyrnel_tool_calls_total"]; got != first["cyrnel_tool_calls_total"]+20 {
		t.Errorf("tool call series %d, want %d + 20 (one per service called)", got, first["cyrnel_tool_calls_total"])
	}
	for _, id := range ids {
		if hits(t, h.s, "cyrnel_tool_calls_total", map[string]string{"service": id, "tool": "showPetById", "outcome": "success"}) != 1 {
			t.Errorf("service %s: its call is not counted under its name", id)
		}
	}
	for _, name := range names {
		if values[name] {
			t.Fatalf("a random name became a label value: %s", name)
		}
	}
	// 2500 rounds of random names made no series beyond the first round's
	// (the services add theirs, counted above; the HTTP routes they used
	// are a handful).
	if extra := total(counts) - total(first) - 2*20; extra > 12 {
		t.Errorf("%d series more after 2500 rounds of random names than after 8:\nbefore %v\nafter  %v", extra, first, counts)
	}
	if hits(t, h.s, "cyrnel_tool_calls_total", map[string]string{"service": "other", "tool": "other", "outcome": "invalid"}) < 5000 {
		t.Errorf("calls to random services and tools are not counted under other")
	}

	for _, id := range ids {
		req, _ := http.NewRequest("DELETE", h.url+"/services/"+id, nil)
		req.Header.Set("Authorization", "Bearer test-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("delete %s: %v %v", id, resp, err)
		}
		resp.Body.Close()
	}
	after, values := series(t, h.s)
	for _, id := range ids {
		if values[id] {
			t.Errorf("deleted service %s still has series", id)
		}
	}
	if after["cyrnel_tool_calls_total"] != first["cyrnel_tool_calls_total"] {
		t.Errorf("tool call series after the deletes %d, want %d", after["cyrnel_tool_calls_total"], first["cyrnel_tool_calls_total"])
	}
}
