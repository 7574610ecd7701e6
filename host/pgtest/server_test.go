package pgtest

import (
	"database/sql"
	"testing"
)

// What a committed transaction wrote survives a fast restart and an
// immediate stop (crash recovery); while stopped, nothing connects.
func TestServerRestarts(t *testing.T) {
	t.Parallel()
	s := NewServer(t)
	db, err := sql.Open("pgx", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	count := func() (int, error) {
		var n int
		err := db.QueryRow("SELECT count(*) FROM kept").Scan(&n)
		return n, err
	}
	s.Restart("fast")
	if _, err := db.Exec("INSERT INTO kept VALUES (2)"); err != nil {
		t.Fatalf("after a fast restart: %v", err)
	}
	s.Stop("immediate")
	if _, err := count(); err == nil {
		t.Fatal("a query answered while the server was stopped")
	}
	s.Start()
	if n, err := count(); err != nil || n != 2 {
		t.Fatalf("after an immediate stop and a start: %d rows, %v", n, err)
	}
}
