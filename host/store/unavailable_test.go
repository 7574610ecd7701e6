package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun/driver/sqliteshim"
)

// TestUnavailable: the errors a database that cannot answer now gives, from
// real drivers, are Unavailable; the controls, errors of a wrong request,
// are not.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// PostgreSQL that is not there: a port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = pgx.Connect(ctx, "postgres://u:p@"+addr+"/db?connect_timeout=2")
	if err == nil || !Unavailable(fmt.Errorf("insert: %w", err)) {
		t.Errorf("connection refused: %v is not Unavailable", err)
	}

	// SQLite held by another connection past a busy timeout of zero.
	path := filepath.Join(t.TempDir(), "db")
	open := func() *sql.DB {
		db, err := sql.Open(sqliteshim.ShimName, "file:"+path+"?_pragma=busy_timeout(0)")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		return db
	}
	a, b := open(), open()
	if _, err := a.Exec("CREATE TABLE t (x)"); err != nil {
		t.Fatal(err)
	}
	tx, err := a.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // the test's own lock
	if _, err := tx.Exec("INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	_, err = b.Exec("INSERT INTO t VALUES (2)")
	if err == nil || !Unavailable(err) {
		t.Errorf("locked SQLite: %v is not Unavailable", err)
	}

	// Controls: a wrong statement, a missing row, nothing.
	_, err = b.Exec("INSERT INTO nowhere VALUES (1)")
	for _, e := range []error{err, sql.ErrNoRows, ErrNotFound, errors.New("bad input"), nil} {
		if Unavailable(e) {
			t.Errorf("%v is Unavailable", e)
		}
	}
}
