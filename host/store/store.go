// Package store persists cyrnel's state with bun: embedded SQLite in the data
// directory by default, PostgreSQL when a postgres:// URL is given.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun/extra/bunotel"
	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/driver/sqliteshim"
	"github.com/uptrace/bun/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrNotFound is returned when a row does not exist.
var ErrNotFound = errors.New("not found")

// ErrFull is returned when the database cannot grow: its disk is full (or,
// on SQLite, it reached its max_page_count).
var ErrFull = errors.New("the database's disk is full")

// classify is the package's classify, noting a corrupt database for Healthy.
func (s *Store) classify(err error) error {
	if err != nil && s.local && corrupt(err) {
		s.damaged.Store(true)
	}
	return classify(err)
}

// classify marks the errors callers act on by kind: a full disk becomes
// ErrFull.
func classify(err error) error {
	if err == nil || errors.Is(err, ErrFull) || !Full(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrFull, err)
}

// Full reports whether err says the database cannot grow: SQLite's
// SQLITE_FULL (its disk is full, or it reached its max_page_count),
// PostgreSQL's disk_full (53100).
func Full(err error) bool {
	if errors.Is(err, ErrFull) {
		return true
	}
	var code interface{ Code() int } // modernc.org/sqlite's errors
	var pg *pgconn.PgError
	return errors.As(err, &code) && code.Code()&0xff == sqliteFull || errors.As(err, &pg) && pg.Code == "53100"
}

// sqliteFull is SQLITE_FULL, the primary result code of a write that found
// no room.
const sqliteFull = 13

// Store is the database handle shared by the host's services.
type Store struct {
	DB     *bun.DB
	local  bool // embedded SQLite
	writes *processWrites
	// reserve is the file holding room for deletes on a full disk (SQLite
	// in the data directory only; "" otherwise).
	reserve string
	// damaged is set once a statement finds the SQLite database corrupt:
	// Healthy reports it until the host restarts (and Open refuses).
	damaged atomic.Bool
	now     func() time.Time // stamps and ages the kill requests
}

// ErrCorrupt is returned by Open when SQLite finds the database damaged.
var ErrCorrupt = errors.New("the database is corrupt")

// ErrEmpty is returned by Open when the data directory was used before but
// its SQLite database is empty: starting would silently drop its history.
var ErrEmpty = errors.New("the database is empty although the data directory was used before")

// Options tune Open.
type Options struct {
	// UsedDataDir says a host ran on the data directory before, so an empty
	// SQLite database there is lost data (ErrEmpty), not a first start.
	UsedDataDir bool
	// Log receives what Open works around (nil: nothing is said).
	Log *slog.Logger
	// Tracing, when set, records a span for every statement made through
	// bun (bunotel); the process rows' prepared writes have spans of their
	// own (host/process).
	Tracing trace.TracerProvider
	// Now is the clock the store stamps what it dates itself by (the kill
	// requests; nil: time.Now). Every other time is the caller's.
	Now func() time.Time
}

// Open connects to dbURL (empty: SQLite in dataDir) and runs the embedded
// migrations.
func Open(ctx context.Context, dbURL, dataDir string, opts ...Options) (*Store, error) {
	var o Options
	for _, x := range opts {
		o = x
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if dbURL == "" && o.UsedDataDir {
		path := filepath.Join(dataDir, sqliteFile)
		if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
			return nil, fmt.Errorf("%s: %w; restore it from a backup, or move the data directory away to start afresh", path, ErrEmpty)
		}
	}
	db, tmpl, err := connect(dbURL, dataDir)
	if err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{DB: db, local: db.Dialect().Name() == dialect.SQLite, now: o.Now}
	where := redact(dbURL)
	if dbURL == "" {
		where = filepath.Join(dataDir, sqliteFile)
	}
	if s.local {
		if err := incrementalVacuum(ctx, db); err != nil {
			// It stays usable; deletes give no room back until a start
			// manages the conversion.
			o.Log.Warn("the database keeps the room deletes free until a start can convert it", "db", where, "err", err)
		}
		if err := quickCheck(ctx, db); err != nil {
			db.Close()
			return nil, fmt.Errorf("%s: %w; restore it from a backup, or move it away to start afresh", where, err)
		}
		s.DB = db.WithQueryHook(corruptionHook{s})
	}
	if o.Tracing != nil {
		s.DB = s.DB.WithQueryHook(bunotel.NewQueryHook(bunotel.WithTracerProvider(o.Tracing), bunotel.WithDBName("cyrnel")))
	}
	if err := s.migrate(ctx, tmpl); err != nil {
		db.Close()
		if s.local && corrupt(err) {
			return nil, fmt.Errorf("%s: %w (%v); restore it from a backup, or move it away to start afresh", where, ErrCorrupt, err)
		}
		return nil, err
	}
	if err := s.syncToolSearch(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if s.writes, err = newProcessWrites(s); err != nil {
		db.Close()
		return nil, err
	}
	if s.local {
		if dbURL == "" {
			s.reserve = reservePath(dataDir)
			_ = s.keepReserve() // without room now, the next Reclaim makes it
		}
	}
	return s, nil
}

// quickCheck runs SQLite's quick_check, which reads every page (linear in
// the database's size, once per start): a damaged page is found before the
// host serves, not by the first execution that touches it.
func quickCheck(ctx context.Context, db *bun.DB) error {
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check(5)")
	if err != nil {
		if corrupt(err) {
			return fmt.Errorf("%w (%v)", ErrCorrupt, err)
		}
		return fmt.Errorf("check the database: %w", err)
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("check the database: %w", err)
		}
		if line != "ok" {
			found = append(found, line)
		}
	}
	if err := rows.Err(); err != nil {
		if corrupt(err) {
			return fmt.Errorf("%w (%v)", ErrCorrupt, err)
		}
		return fmt.Errorf("check the database: %w", err)
	}
	if len(found) > 0 {
		return fmt.Errorf("%w (%s)", ErrCorrupt, strings.Join(found, "; "))
	}
	return nil
}

// corruptionHook marks the store damaged when any query finds the database
// corrupt.
type corruptionHook struct{ s *Store }

func (corruptionHook) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }

func (h corruptionHook) AfterQuery(_ context.Context, ev *bun.QueryEvent) {
	if ev.Err != nil && corrupt(ev.Err) {
		h.s.damaged.Store(true)
	}
}

// Healthy reports whether the database answers a read now and no statement
// found it corrupt: what a readiness check asks of it.
func (s *Store) Healthy(ctx context.Context) error {
	if s.damaged.Load() {
		return ErrCorrupt
	}
	var one int
	if err := s.DB.NewSelect().ColumnExpr("1").Table("processes").Limit(1).Scan(ctx, &one); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("read the database: %w", s.classify(err))
	}
	return nil
}

// sqliteFile is the database's name in the data directory.
const sqliteFile = "cyrnel.db"

// corrupt reports SQLite's SQLITE_CORRUPT and SQLITE_NOTADB. Read from the
// message, which SQLite fixes (sqlite3_errstr) and both drivers sqliteshim
// may pick report; their error types differ.
func corrupt(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "database disk image is malformed") || strings.Contains(msg, "file is not a database")
}

// dialectSQL fills the dialect-specific parts of the migration templates.
type dialectSQL struct {
	PK   string
	Time string
	Blob string
	// SQLite selects the embedded store's form where the two differ (tool
	// search: FTS5 there, tsvector on PostgreSQL).
	SQLite bool
}

func connect(dbURL, dataDir string) (*bun.DB, dialectSQL, error) {
	if strings.HasPrefix(dbURL, "postgres://") || strings.HasPrefix(dbURL, "postgresql://") {
		sqldb, err := sql.Open("pgx", dbURL)
		if err != nil {
			return nil, dialectSQL{}, fmt.Errorf("open postgres: %w", err)
		}
		return bun.NewDB(sqldb, pgdialect.New()), dialectSQL{
			PK: "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", Time: "TIMESTAMPTZ", Blob: "BYTEA",
		}, nil
	}
	path, extra := dbURL, ""
	switch {
	case path == "":
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, dialectSQL{}, fmt.Errorf("create data dir: %w", err)
		}
		path = filepath.Join(dataDir, sqliteFile)
	case strings.HasPrefix(path, "sqlite://"):
		// sqlite://PATH?_pragma=…: the operator's pragmas follow ours
		// (max_page_count, for one, bounds the database's size).
		path, extra, _ = strings.Cut(strings.TrimPrefix(path, "sqlite://"), "?")
	case strings.Contains(path, "://"):
		return nil, dialectSQL{}, fmt.Errorf("unsupported database URL scheme in %q (use postgres:// or sqlite://PATH)", redact(dbURL))
	}
	// WAL lets readers proceed while one writer commits; the busy timeout
	// absorbs writer contention; immediate transactions avoid lock upgrades
	// that would fail with SQLITE_BUSY instead of waiting.
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)" +
		"&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate"
	if extra != "" {
		dsn += "&" + extra
	}
	sqldb, err := sql.Open(sqliteshim.ShimName, dsn)
	if err != nil {
		return nil, dialectSQL{}, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// Keep connections open: opening one (and applying its pragmas) costs
	// more than the statements on the hot path.
	sqldb.SetMaxOpenConns(8)
	sqldb.SetMaxIdleConns(8)
	return bun.NewDB(sqldb, sqlitedialect.New()), dialectSQL{
		PK: "INTEGER PRIMARY KEY AUTOINCREMENT", Time: "TIMESTAMP", Blob: "BLOB", SQLite: true,
	}, nil
}

// redact drops credentials from a database URL for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

func (s *Store) migrate(ctx context.Context, tmpl dialectSQL) error {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	ms := migrate.NewMigrations()
	if err := ms.Discover(sub); err != nil {
		return fmt.Errorf("discover migrations: %w", err)
	}
	ms.Add(processesWithAutoincrement)
	m := migrate.NewMigrator(s.DB, ms, migrate.WithTemplateData(tmpl), migrate.WithMarkAppliedOnSuccess(true))
	if !s.local {
		// Several hosts may start at once: bun's lock row fails the
		// second host instead of making it wait, and even creating the
		// bookkeeping tables races. A session advisory lock, held on one
		// connection while the migrator uses others, serialises the whole
		// of it; whoever comes second finds nothing left to do.
		conn, err := s.DB.Conn(ctx)
		if err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", migrationLock); err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(?)", migrationLock) //nolint:errcheck // closing the session releases it too
	}
	if err := m.Init(ctx); err != nil {
		return fmt.Errorf("init migrations: %w", err)
	}
	if s.local {
		if err := m.Lock(ctx); err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
		defer m.Unlock(ctx) //nolint:errcheck // best effort; the lock row is advisory
	}
	if _, err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// migrationLock is the advisory lock key under which hosts migrate the
// schema ("cyrnel" in ASCII).
const migrationLock int64 = 0x6379726e656c

// Local reports whether the database is the embedded SQLite one (one host).
func (s *Store) Local() bool { return s.local }

// Close closes the prepared statements and the database.
func (s *Store) Close() error {
	return errors.Join(append(s.writes.close(), s.DB.Close())...)
}
