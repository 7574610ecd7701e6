package store

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnavailable says the database cannot answer now (it cannot be reached,
// is restarting, or, on SQLite, stays locked): the same request may succeed
// shortly.
var ErrUnavailable = errors.New("the database is unavailable")

// Unavailable reports whether err says the database could not answer now,
// rather than that the request was wrong: PostgreSQL unreachable, shutting
// down, restarting or out of connections, its connection lost mid-way;
// SQLite busy or locked past its busy timeout.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		// Class 08: connection exceptions; 57P01-03: admin or crash
		// shutdown, cannot connect now; 53300: too many connections.
		return strings.HasPrefix(pg.Code, "08") || pg.Code == "57P01" || pg.Code == "57P02" ||
			pg.Code == "57P03" || pg.Code == "53300"
	}
	var code interface{ Code() int } // modernc.org/sqlite's errors
	if errors.As(err, &code) {
		c := code.Code() & 0xff
		return c == sqliteBusy || c == sqliteLocked
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connect) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		pgconn.SafeToRetry(err) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn)
}

// SQLite's primary result codes for a database another connection holds.
const (
	sqliteBusy   = 5
	sqliteLocked = 6
)
