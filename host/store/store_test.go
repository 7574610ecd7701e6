package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// stores yields a fresh SQLite store and, when CYRNEL_TEST_POSTGRES_URL
// names a database, a PostgreSQL one in a fresh schema, so every operation is
// checked on both dialects.
func stores(t *testing.T) map[string]*Store {
	t.Helper()
	out := map[string]*Store{}
	ctx := context.Background()
	st, err := Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	out["sqlite"] = st
	if url := os.Getenv("CYRNEL_TEST_POSTGRES_URL"); url != "" {
		// A schema of its own, so tests sharing the database never meet.
		db, _, err := connect(url, "")
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("cyrnel_store_test_%d", time.Now().UnixNano())
		if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			db.ExecContext(context.Background(), "DROP SCHEMA "+name+" CASCADE")
			db.Close()
		})
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		pg, err := Open(ctx, url+sep+"search_path="+name, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pg.Close() })
		out["postgres"] = pg
	}
	return out
}

func TestProcessesOnEveryDialect(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			var pids []int64
			for i := range 5 {
				p := &Process{Code: "x", Ref: fmt.Sprintf("r%d", i%2), State: "queued", TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h1",
					EnvConfig: map[string]any{"k": 1.0}}
				if err := st.InsertProcess(ctx, p); err != nil {
					t.Fatal(err)
				}
				pids = append(pids, p.PID)
			}
			if pids[0] < 1 || pids[4] <= pids[3] {
				t.Fatalf("pids %v", pids)
			}
			// Compare-and-set: only from a listed state.
			exit := "success"
			p := &Process{PID: pids[0], State: "idle", ExitState: &exit, Output: map[string]any{"a": []any{1.0}}}
			if ok, err := st.TransitionProcess(ctx, p, []string{"queued"}, "state", "exit_state", "output"); !ok || err != nil {
				t.Fatalf("transition: %v %v", ok, err)
			}
			if ok, _ := st.TransitionProcess(ctx, &Process{PID: pids[0], State: "running"}, []string{"queued"}, "state"); ok {
				t.Fatal("transition from a state the row is not in")
			}
			got, err := st.GetProcess(ctx, pids[0])
			if err != nil || got.State != "idle" || *got.ExitState != "success" || got.Output["a"].([]any)[0] != 1.0 || got.EnvConfig["k"] != 1.0 {
				t.Fatalf("get: %+v %v", got, err)
			}
			// Listing: newest first, filters, cursor.
			list, err := st.ListProcesses(ctx, ProcessFilter{Ref: "r0", Limit: 10})
			if err != nil || len(list) != 3 || list[0].PID != pids[4] {
				t.Fatalf("list: %v %v", list, err)
			}
			list, _ = st.ListProcesses(ctx, ProcessFilter{State: "queued", BeforePID: pids[3], Limit: 10})
			if len(list) != 2 || list[0].PID != pids[2] {
				t.Fatalf("list before: %+v", list)
			}
			// Recovery touches only this host's live processes.
			other := &Process{Code: "x", State: "running", TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h2"}
			st.InsertProcess(ctx, other)
			n, err := st.FinishAll(ctx, "h1", []string{"queued", "running"}, "failed", "host_restart", "gone", time.Now())
			if err != nil || n != 4 {
				t.Fatalf("finish all: %d %v", n, err)
			}
			if o, _ := st.GetProcess(ctx, other.PID); o.State != "running" {
				t.Fatalf("another host's process was finished: %+v", o)
			}
			if ok, err := st.DeleteProcess(ctx, pids[1], []string{"idle"}); !ok || err != nil {
				t.Fatalf("delete: %v %v", ok, err)
			}
			if _, err := st.GetProcess(ctx, pids[1]); !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted: %v", err)
			}
			next := &Process{Code: "x", State: "idle", TimeoutMs: 1, CreatedAt: time.Now()}
			st.InsertProcess(ctx, next)
			if next.PID <= other.PID {
				t.Fatalf("pid reused: %d", next.PID)
			}
		})
	}
}

func TestServicesModulesSettingsOnEveryDialect(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			raw := json.RawMessage(`{}`)
			svc := &Service{ID: "pets", Adapter: "openapi", Name: "Pets", Source: json.RawMessage(`{"content":"x"}`), ConfigSchema: raw, SecretsSchema: raw,
				AdapterDomain: raw, Secrets: []byte{1, 2, 3}, Enabled: true, CreatedAt: now, UpdatedAt: now}
			var tools []Tool
			for i := range 150 { // more than one insert batch
				tools = append(tools, Tool{ServiceID: "pets", ID: fmt.Sprintf("t%03d", i), Name: fmt.Sprintf("Tool %d", i),
					Description: "does 50%_things", InputSchema: raw, OutputSchema: raw, AdapterDomain: raw, Enabled: i%2 == 0})
			}
			if err := st.InsertService(ctx, svc, tools); err != nil {
				t.Fatal(err)
			}
			if err := st.InsertService(ctx, svc, tools); !errors.Is(err, ErrExists) {
				t.Fatalf("insert twice: %v", err)
			}
			on := true
			got, err := st.ListTools(ctx, ToolFilter{ServiceID: "pets", Enabled: &on, Limit: 200})
			if err != nil || len(got) != 75 {
				t.Fatalf("enabled tools: %d %v", len(got), err)
			}
			// LIKE wildcards in the query are literal.
			if got, _ = st.ListTools(ctx, ToolFilter{Query: "50%_THINGS", Limit: 200}); len(got) != 150 {
				t.Fatalf("query: %d", len(got))
			}
			if got, _ = st.ListTools(ctx, ToolFilter{Query: "5%x", Limit: 200}); len(got) != 0 {
				t.Fatalf("wildcard matched: %d", len(got))
			}
			got, _ = st.ListTools(ctx, ToolFilter{AfterKey: [2]string{"pets", "t147"}, Limit: 10})
			if len(got) != 2 || got[0].ID != "t148" {
				t.Fatalf("after key: %+v", got)
			}
			if err := st.SetToolEnabled(ctx, "pets", "t001", true); err != nil {
				t.Fatal(err)
			}
			if g, _ := st.GetService(ctx, "pets"); string(g.Secrets) != "\x01\x02\x03" {
				t.Fatalf("secrets bytes: %v", g.Secrets)
			}
			if err := st.DeleteService(ctx, "pets"); err != nil {
				t.Fatal(err)
			}
			if got, _ = st.ListTools(ctx, ToolFilter{ServiceID: "pets"}); len(got) != 0 {
				t.Fatalf("tools survive their service: %d", len(got))
			}
			if err := st.SetSetting(ctx, "k", "a"); err != nil {
				t.Fatal(err)
			}
			st.SetSetting(ctx, "k", "b")
			if v, ok, _ := st.Setting(ctx, "k"); !ok || v != "b" {
				t.Fatalf("setting %q %v", v, ok)
			}
			m := &Module{ID: "python", Enabled: true, Config: map[string]any{"poolSize": 3.0}, UpdatedAt: now}
			if err := st.PutModule(ctx, m); err != nil {
				t.Fatal(err)
			}
			m.Enabled = false
			st.PutModule(ctx, m)
			if g, err := st.GetModule(ctx, "python"); err != nil || g.Enabled || g.Config["poolSize"] != 3.0 {
				t.Fatalf("module %+v %v", g, err)
			}
		})
	}
}
