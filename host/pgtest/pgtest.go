// Package pgtest gives tests a PostgreSQL of their own: a fresh schema in
// the test database (`make test` provides one), an Outage proxy in front
// of it that a test cuts and restores, as a database that stops, restarts
// or becomes unreachable does, and a Server, a cluster of the test's own
// that it really restarts and stops. Only tests import it.
package pgtest

import (
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver
)

// URL is the test database (CYRNEL_TEST_POSTGRES_URL). Without one the test
// fails, unless CYRNEL_TEST_NO_POSTGRES says why this machine has none.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("CYRNEL_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	if reason := os.Getenv("CYRNEL_TEST_NO_POSTGRES"); reason != "" {
		t.Skipf("no PostgreSQL to test against (CYRNEL_TEST_NO_POSTGRES: %s)", reason)
	}
	t.Fatal("CYRNEL_TEST_POSTGRES_URL is not set; run `make test`, or set CYRNEL_TEST_NO_POSTGRES=<why>")
	return ""
}

// Schema makes a schema of its own in the database at base (URL(t) for the
// test database), dropped after the test, and returns the URL that uses it:
// tests sharing the database never meet (nor hear each other's
// notifications, whose channel is per schema).
func Schema(t testing.TB, base string) string {
	t.Helper()
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cyrnel_test_%d", time.Now().UnixNano())
	if _, err := db.Exec("CREATE SCHEMA " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec("DROP SCHEMA " + name + " CASCADE")
		db.Close()
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + name
}

// Outage stands between clients and a database: Cut drops every connection
// and refuses new ones, as a database that stopped does; Restore lets them
// through again.
type Outage struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

// NewOutage proxies to the database of rawURL and returns the URL through
// the proxy; the proxy closes with the test.
func NewOutage(t testing.TB, rawURL string) (*Outage, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &Outage{target: u.Host, ln: ln, conns: map[net.Conn]struct{}{}}
	go o.accept()
	t.Cleanup(func() { ln.Close(); o.Cut() })
	u.Host = ln.Addr().String()
	return o, u.String()
}

func (o *Outage) accept() {
	for {
		c, err := o.ln.Accept()
		if err != nil {
			return
		}
		o.mu.Lock()
		down := o.down
		o.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", o.target)
		if err != nil {
			c.Close()
			continue
		}
		o.mu.Lock()
		o.conns[c], o.conns[up] = struct{}{}, struct{}{}
		o.mu.Unlock()
		go func() { io.Copy(up, c); up.Close(); c.Close() }()
		go func() { io.Copy(c, up); up.Close(); c.Close() }()
	}
}

// Cut drops every connection through the proxy and refuses new ones.
func (o *Outage) Cut() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = true
	for c := range o.conns {
		c.Close()
	}
	clear(o.conns)
}

// Restore lets connections through again.
func (o *Outage) Restore() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = false
}
