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

	"github.com/cyrnel/cyrnel/host/pgtest"
)

// stores yields a fresh SQLite store and, when CYRNEL_TEST_POSTGRES_URL
// names a database, a PostgreSQL one in a fresh schema, so every operation is
// checked on both dialects.
func stores(t *testing.T) map[string]*Store {
	t.Helper()
	out := map[string]*Store{}
	ctx := context.Background()
	out["sqlite"] = openSQLite(t)
	if url := postgresURL(t); url != "" {
		pg, err := Open(ctx, pgtest.Schema(t, url), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pg.Close() })
		out["postgres"] = pg
	}
	return out
}

func TestProcessesOnEveryDialect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			var pids []int64
			for i := range 5 {
				p := &Process{Code: "x", Ref: fmt.Sprintf("r%d", i%2), State: "queued", TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h1",
					EnvConfig: map[string]any{"k": 1.0}}
				write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, p) })
				pids = append(pids, p.PID)
			}
			if pids[0] < 1 || pids[4] <= pids[3] {
				t.Fatalf("pids %v", pids)
			}
			// Compare-and-set: only from a listed state.
			exit := "success"
			p := &Process{PID: pids[0], State: "idle", ExitState: &exit, Output: map[string]any{"a": []any{1.0}}}
			if ok, err := inTx(st, func(tx *Tx) (bool, error) {
				return tx.TransitionProcess(ctx, p, []string{"queued"}, "state", "exit_state", "output")
			}); !ok || err != nil {
				t.Fatalf("transition: %v %v", ok, err)
			}
			if ok, _ := inTx(st, func(tx *Tx) (bool, error) {
				return tx.TransitionProcess(ctx, &Process{PID: pids[0], State: "running"}, []string{"queued"}, "state")
			}); ok {
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
			write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, other) })
			n, err := inTx(st, func(tx *Tx) (int64, error) {
				return tx.FinishAll(ctx, "h1", []string{"queued", "running"}, "failed", "host_restart", "gone", time.Now())
			})
			if err != nil || n != 4 {
				t.Fatalf("finish all: %d %v", n, err)
			}
			if o, _ := st.GetProcess(ctx, other.PID); o.State != "running" {
				t.Fatalf("another host's process was finished: %+v", o)
			}
			if ok, err := inTx(st, func(tx *Tx) (bool, error) { return tx.DeleteProcess(ctx, pids[1], []string{"idle"}) }); !ok || err != nil {
				t.Fatalf("delete: %v %v", ok, err)
			}
			if _, err := st.GetProcess(ctx, pids[1]); !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted: %v", err)
			}
			next := &Process{Code: "x", State: "idle", TimeoutMs: 1, CreatedAt: time.Now()}
			write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, next) })
			if next.PID <= other.PID {
				t.Fatalf("pid reused: %d", next.PID)
			}
		})
	}
}

func TestServicesModulesSettingsOnEveryDialect(t *testing.T) {
	t.Parallel()
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
			// The search index follows the tools; query syntax is words only.
			if found, err := st.SearchTools(ctx, SearchFilter{Query: "THINGS", Limit: 200}); err != nil || len(found) != 150 || found[0].Score <= 0 {
				t.Fatalf("search: %d %v", len(found), err)
			}
			if found, err := st.SearchTools(ctx, SearchFilter{Query: `zz" OR * NEAR(`, Limit: 200}); err != nil || len(found) != 0 {
				t.Fatalf("search with syntax in it: %d %v", len(found), err)
			}
			if found, _ := st.SearchTools(ctx, SearchFilter{Query: "tool 7", Enabled: &on, Limit: 3}); len(found) != 3 {
				t.Fatalf("search enabled tools: %+v", found)
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
			if found, _ := st.SearchTools(ctx, SearchFilter{Query: "things", Limit: 10}); len(found) != 0 {
				t.Fatalf("deleted tools found: %d", len(found))
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

// TestProgressAppendsToItsOwnExecution: progress and the final write land
// on a live row of the same run only, so a late write can neither reopen a
// finished process nor land on its next run.
func TestProgressAppendsToItsOwnExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			p := &Process{Code: "x", State: "running", TimeoutMs: 1, CreatedAt: time.Now(), Runs: 2}
			write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, p) })
			for _, c := range []struct {
				runs int64
				want bool
			}{{2, true}, {2, true}, {1, false}} {
				var ok bool
				write(t, st, func(tx *Tx) (err error) {
					ok, err = tx.AppendProgress(ctx, &Progress{PID: p.PID, Runs: c.runs, Stdout: "o", Stderr: "e", Output: map[string]any{"k": 1.0}, StderrTruncated: true})
					return err
				})
				if ok != c.want {
					t.Fatalf("runs %d: appended %v", c.runs, ok)
				}
			}
			got, err := st.GetProcess(ctx, p.PID)
			if err != nil || got.Stdout != "oo" || got.Stderr != "ee" || got.Output["k"] != 1.0 || !got.StderrTruncated || got.StdoutTruncated {
				t.Fatalf("got %+v %v", got, err)
			}
			exit := "success"
			for _, runs := range []int64{1, 2} { // an earlier run's result is not this one's
				var ok bool
				write(t, st, func(tx *Tx) (err error) {
					ok, err = tx.FinishProcess(ctx, &Process{PID: p.PID, Runs: runs, State: "idle", ExitState: &exit, Stdout: "final"})
					return err
				})
				if ok != (runs == 2) {
					t.Fatalf("runs %d: finished %v", runs, ok)
				}
			}
			write(t, st, func(tx *Tx) error {
				ok, err := tx.AppendProgress(ctx, &Progress{PID: p.PID, Runs: 2, Stdout: "late"})
				if ok {
					t.Error("progress appended to a finished process")
				}
				return err
			})
			if got, _ := st.GetProcess(ctx, p.PID); got.Stdout != "final" {
				t.Fatalf("stdout %q", got.Stdout)
			}
		})
	}
}

// TestAFullDatabaseIsErrFull: a write the database has no room for fails
// as ErrFull, rolled back whole; deleting rows makes room again.
func TestAFullDatabaseIsErrFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	// SQLite's limit on the file's pages fails a write as a full disk does:
	// room for a few rows beyond what the migrated schema holds.
	fi, err := os.Stat(dir + "/cyrnel.db")
	if err != nil {
		t.Fatal(err)
	}
	st, err = Open(ctx, fmt.Sprintf("sqlite://%s/cyrnel.db?_pragma=max_page_count(%d)", dir, fi.Size()/4096+8), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var pids []int64
	for {
		p := &Process{Code: strings.Repeat("x", 30<<10), State: "idle", CreatedAt: time.Now()}
		err := st.WriteProcesses(ctx, func(ctx context.Context, tx *Tx) error { return tx.InsertProcess(ctx, p) })
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil || len(pids) > 100 {
			t.Fatalf("after %d rows: %v", len(pids), err)
		}
		pids = append(pids, p.PID)
	}
	write(t, st, func(tx *Tx) error {
		ok, err := tx.DeleteProcess(ctx, pids[0], []string{"idle"})
		if !ok {
			t.Error("not deleted")
		}
		return err
	})
	write(t, st, func(tx *Tx) error {
		return tx.InsertProcess(ctx, &Process{Code: "x", State: "idle", CreatedAt: time.Now()})
	})
}

// inTx runs one write returning a value in its own transaction.
func inTx[T any](st *Store, fn func(*Tx) (T, error)) (T, error) {
	var v T
	err := st.WriteProcesses(context.Background(), func(_ context.Context, tx *Tx) (err error) {
		v, err = fn(tx)
		return err
	})
	return v, err
}

// openSQLite opens a SQLite store in a directory of the test's, closed
// when the test ends.
func openSQLite(t *testing.T) *Store {
	t.Helper()
	st, err := Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newIdleProcess stores an idle process and returns its pid.
func newIdleProcess(t *testing.T, st *Store) int64 {
	t.Helper()
	p := &Process{Code: "x", State: "idle", TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h"}
	write(t, st, func(tx *Tx) error { return tx.InsertProcess(context.Background(), p) })
	return p.PID
}

// write runs fn in one of the store's write transactions.
func write(t *testing.T, st *Store, fn func(*Tx) error) {
	t.Helper()
	if err := st.WriteProcesses(context.Background(), func(_ context.Context, tx *Tx) error { return fn(tx) }); err != nil {
		t.Fatal(err)
	}
}

// TestListingsUseThePartialIndexes: the indexes on state and ref leave out
// idle processes and those without a ref, so inserting a finished process
// skips them; listings by a live state or by ref must still use them.
func TestListingsUseThePartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	for _, c := range []struct {
		filter ProcessFilter
		index  string
	}{
		{ProcessFilter{State: "running", Limit: 10}, "processes_live_idx"},
		{ProcessFilter{State: "suspended", Limit: 10}, "processes_live_idx"},
		{ProcessFilter{Ref: "nightly", Limit: 10}, "processes_ref_idx"},
		{ProcessFilter{Ref: "nightly", State: "idle", BeforePID: 100, Limit: 10}, "processes_ref_idx"},
		{ProcessFilter{Owner: "key_a", Limit: 10}, "processes_owner_idx"},
		{ProcessFilter{Owner: "key_a", BeforePID: 100, Limit: 10}, "processes_owner_idx"},
	} {
		var ps []Process
		rows, err := st.DB.QueryContext(ctx, "EXPLAIN QUERY PLAN "+st.listQuery(&ps, c.filter).String())
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "; "), c.index) {
			t.Errorf("%+v: plan %q does not use %s", c.filter, plan, c.index)
		}
	}
}

// TestExecutionWritesNeedNoTemporaryTable: the two writes of every
// execution run without a temporary b-tree on SQLite (OpenEphemeral, which
// a list of states in the final row's condition costs on every execution:
// memory the pure-Go SQLite maps and unmaps each time), and the control, a
// list of four states, is seen to need one.
func TestExecutionWritesNeedNoTemporaryTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	ephemeral := func(query string) bool {
		// Every parameter bound to NULL: the program does not depend on them.
		rows, err := st.DB.DB.QueryContext(ctx, "EXPLAIN "+query, make([]any, strings.Count(query, "?"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for rows.Next() {
			v := make([]any, len(cols))
			for i := range v {
				v[i] = new(any)
			}
			if err := rows.Scan(v...); err != nil {
				t.Fatal(err)
			}
			if op := fmt.Sprint(*v[1].(*any)); op == "OpenEphemeral" {
				found = true
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return found
	}
	for name, q := range map[string]string{"insert": st.insertSQL(), "finish": st.finishSQL()} {
		if ephemeral(q) {
			t.Errorf("%s opens a temporary b-tree: %s", name, q)
		}
	}
	if !ephemeral("UPDATE processes SET state = 'idle' WHERE pid = ? AND state IN (?, ?, ?, ?)") {
		t.Error("control: a list of four states is not seen to open a temporary b-tree")
	}
}

// postgresURL is the database the PostgreSQL half of the store tests uses
// (`make test` provides one where it can). Without one the tests fail, unless
// CYRNEL_TEST_NO_POSTGRES says why this machine has none: then they run on
// SQLite only.
func postgresURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("CYRNEL_TEST_POSTGRES_URL")
	if url == "" && os.Getenv("CYRNEL_TEST_NO_POSTGRES") == "" {
		t.Fatal("CYRNEL_TEST_POSTGRES_URL is not set; run `make test`, or set CYRNEL_TEST_NO_POSTGRES=<why> to test SQLite only")
	}
	return url
}

// TestPidsAreNeverGivenTwice: deleting the newest process does not give
// its pid to the next one.
func TestPidsAreNeverGivenTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			first, newest := newIdleProcess(t, st), newIdleProcess(t, st)
			for _, pid := range []int64{newest, first} {
				if ok, err := inTx(st, func(tx *Tx) (bool, error) { return tx.DeleteProcess(ctx, pid, []string{"idle"}) }); !ok || err != nil {
					t.Fatalf("delete %d: %v %v", pid, ok, err)
				}
			}
			if next := newIdleProcess(t, st); next <= newest {
				t.Fatalf("pid %d after deleting %d and %d", next, first, newest)
			}
		})
	}
}

// TestUnkeyableLookupsFindNothing: a key with a NUL or invalid UTF-8 finds
// nothing on either dialect (SQLite's tokenizer and PostgreSQL's encoding
// check would fail the query with their own words); a plain unknown key is
// the control.
func TestUnkeyableLookupsFindNothing(t *testing.T) {
	t.Parallel()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for _, key := range []string{"a\x00b", "\x00", "\xff\xfe", "nope"} {
				_, e1 := st.GetSession(ctx, key)
				_, e2 := st.GetApproval(ctx, key)
				_, e3 := st.GetService(ctx, key)
				_, e4 := st.GetTool(ctx, "s", key)
				_, e5 := st.GetModule(ctx, key)
				_, _, e6 := st.OpenProcessFile(ctx, 1, key)
				e7 := st.DeleteService(ctx, key)
				e8 := st.SetToolEnabled(ctx, key, "t", true)
				for i, err := range []error{e1, e2, e3, e4, e5, e6, e7, e8} {
					if !errors.Is(err, ErrNotFound) {
						t.Errorf("lookup %d of %q: %v, want not found", i+1, key, err)
					}
				}
				if ok, err := st.DecideApproval(ctx, key, "approved", "", time.Now()); ok || err != nil {
					t.Errorf("decide %q: %v %v", key, ok, err)
				}
			}
		})
	}
}
