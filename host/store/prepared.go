package store

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun/schema"
)

// The two writes of every execution, the insert and the final row, are
// prepared statements (docs/decisions.md, "Tricks that stay"): bun inlines
// arguments into the SQL text, so each of its statements is parsed anew,
// and on SQLite it reads the new pid from a RETURNING result set. Their SQL
// and arguments come from bun's table for Process (its struct tags, the
// one list of the columns) and finishColumns, with the dialect's own
// placeholders; the values are those bun would write, so bun reads the rows
// back unchanged (TestEveryColumnRoundTrips compares them).

// finishColumns are the columns the write that ends an execution sets.
var finishColumns = []string{"state", "exit_state", "reason", "error", "environment",
	"output", "stdout", "stderr", "stdout_truncated", "stderr_truncated", "output_truncated",
	"started_at", "finished_at", "duration_ms", "cpu_ms", "peak_memory_bytes", "displays"}

// processWrites holds the prepared writes of a store.
type processWrites struct {
	insert, finish []*schema.Field // the columns each sets, in order

	mu    sync.Mutex
	stmts map[string]*sql.Stmt // by SQL text
}

func newProcessWrites(s *Store) (*processWrites, error) {
	table := s.DB.Table(reflect.TypeFor[Process]())
	w := &processWrites{stmts: map[string]*sql.Stmt{}}
	for _, f := range table.Fields {
		if !f.IsPK {
			w.insert = append(w.insert, f)
		}
	}
	for _, name := range finishColumns {
		f := table.LookupField(name)
		if f == nil {
			return nil, fmt.Errorf("finish: no column %q in processes", name)
		}
		w.finish = append(w.finish, f)
	}
	return w, nil
}

// placeholder is the dialect's n-th parameter (from 1).
func (s *Store) placeholder(n int) string {
	if s.local {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

// insertSQL inserts every column but the pid; PostgreSQL returns the pid
// (SQLite's is the statement's last insert id).
func (s *Store) insertSQL() string {
	names, params := make([]string, len(s.writes.insert)), make([]string, len(s.writes.insert))
	for i, f := range s.writes.insert {
		names[i], params[i] = f.Name, s.placeholder(i+1)
	}
	q := "INSERT INTO processes (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(params, ", ") + ")"
	if !s.local {
		q += " RETURNING pid"
	}
	return q
}

// finishSQL sets the finish columns where pid and runs match and the
// state is not yet the final one. A list of states (state IN (…)) would
// make SQLite build a temporary b-tree for the list on every execution.
func (s *Store) finishSQL() string {
	set := make([]string, len(s.writes.finish))
	for i, f := range s.writes.finish {
		set[i] = f.Name + " = " + s.placeholder(i+1)
	}
	k := len(set)
	return "UPDATE processes SET " + strings.Join(set, ", ") +
		" WHERE pid = " + s.placeholder(k+1) + " AND runs = " + s.placeholder(k+2) + " AND state <> " + s.placeholder(k+3)
}

// args are the values of p's fields as bun writes them: NULL for a nil
// pointer or a nullzero field's zero value, times on SQLite as the text
// bun's SQLite dialect writes (UTC, microseconds), and the rest as they
// are (Object and Displays encode themselves, as they do for bun).
func (s *Store) args(p *Process, fields []*schema.Field) []any {
	v := reflect.ValueOf(p).Elem()
	out := make([]any, 0, len(fields)+8)
	for _, f := range fields {
		fv := f.Value(v)
		if (f.IsPtr && fv.IsNil()) || (f.NullZero && f.IsZero(fv)) {
			out = append(out, nil)
			continue
		}
		x := reflect.Indirect(fv).Interface()
		if t, ok := x.(time.Time); ok && s.local {
			x = t.UTC().Format("2006-01-02 15:04:05.999999-07:00")
		}
		out = append(out, x)
	}
	return out
}

// stmt returns the prepared statement for query, preparing it the first
// time, bound to tx if there is one. The queries are the store's own, so
// the set is small and fixed.
func (s *Store) stmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	w := s.writes
	w.mu.Lock()
	stmt, ok := w.stmts[query]
	if !ok {
		var err error
		if stmt, err = s.DB.DB.PrepareContext(ctx, query); err != nil {
			w.mu.Unlock()
			return nil, fmt.Errorf("prepare: %w", err)
		}
		w.stmts[query] = stmt
	}
	w.mu.Unlock()
	if tx != nil {
		return tx.StmtContext(ctx, stmt), nil
	}
	return stmt, nil
}

// close closes the prepared statements.
func (w *processWrites) close() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for q, stmt := range w.stmts {
		errs = append(errs, stmt.Close())
		delete(w.stmts, q)
	}
	return errs
}
