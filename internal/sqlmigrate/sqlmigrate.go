package sqlmigrate

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/sqlerr"
)

// Migration is one migration file.
type Migration struct {
	Version int    // the number the file name starts with
	File    string // the file name, e.g. "001_create_inbox.sql"
	SQL     string // the file's text with the placeholders filled in
}

// ErrLockTimeout means a MySQL runner waited 60 s for the migration lock
// without getting it: another runner is slow or stuck.
var ErrLockTimeout = errors.New("timed out waiting for the migration lock")

// mysqlLockWait is GET_LOCK's timeout, in seconds.
const mysqlLockWait = 60

// sqliteSwitchWait bounds how long an SQLite runner retries a connection,
// or its BEGIN IMMEDIATE, that SQLite answered with SQLITE_BUSY at once:
// what a new file answers while another connection switches it to WAL
// (busy_timeout does not cover the switch). A minute is far more than a
// switch takes on a loaded machine; the caller's context ends it sooner.
const sqliteSwitchWait = time.Minute

// Load reads the migrations in dir of fsys: the files named NNN_name.sql
// (other files are ignored), in version order, with r applied to their text
// (r may be nil). It fails on a malformed name, a repeated version or an
// empty directory.
func Load(fsys fs.FS, dir string, r *strings.Replacer) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, _ := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 || strings.Trim(num, "0123456789") != "" {
			return nil, fmt.Errorf("migration %s: the name must be NNN_name.sql with NNN a positive number", name)
		}
		text, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read migration: %w", err)
		}
		s := string(text)
		if r != nil {
			s = r.Replace(s)
		}
		out = append(out, Migration{Version: v, File: name, SQL: s})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no migrations (NNN_name.sql) in %s", dir)
	}
	slices.SortFunc(out, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s have the same version", out[i-1].File, out[i].File)
		}
	}
	return out, nil
}

// Config says where Run records the applied versions and which lock it
// takes. Every field but the lock (unused by SQLite) is required.
type Config struct {
	Dialect sqldialect.Dialect

	// VersionTable records the applied versions. CreateVersionTable
	// creates it if it is missing (CREATE TABLE IF NOT EXISTS …) and
	// RecordFunc returns the INSERT that records m as applied. Run only
	// reads the version column.
	VersionTable       string
	CreateVersionTable string
	RecordFunc         func(m Migration) (query string, args []any)

	// LockKey is an SQL expression of one bind parameter, LockArg, that
	// names the lock: for PostgreSQL an integer (the pg_advisory_xact_lock
	// key), for MySQL a string of at most 64 characters (the GET_LOCK
	// name). Scope it to the schema or database and the table, so that
	// unrelated tables do not wait for each other. SQLite ignores both.
	LockKey string
	LockArg any
}

func (c *Config) validate() error {
	switch {
	case !c.Dialect.Valid():
		return configError("Config.Dialect", fmt.Sprintf("unknown dialect %v", c.Dialect))
	case c.VersionTable == "":
		return configError("Config.VersionTable", "empty: it is required")
	case c.CreateVersionTable == "":
		return configError("Config.CreateVersionTable", "empty: it is required")
	case c.RecordFunc == nil:
		return configError("Config.RecordFunc", "nil: it is required")
	case c.Dialect != sqldialect.SQLite && c.LockKey == "":
		return configError("Config.LockKey", fmt.Sprintf("empty: it is required for %v", c.Dialect))
	}
	return nil
}

// Run applies the migrations in ms (as Load returns them) that are not yet
// recorded in c.VersionTable, in order, holding the database lock described
// in the package documentation. A migration that fails is reported by its
// file name, and the run is rolled back where the dialect allows.
func Run(ctx context.Context, db *sql.DB, ms []Migration, c Config) (err error) {
	if err := c.validate(); err != nil {
		return err
	}
	if !slices.IsSortedFunc(ms, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) }) {
		return errors.New("sqlmigrate: migrations are not in version order")
	}
	var conn *sql.Conn
	if c.Dialect == sqldialect.SQLite {
		conn, err = sqliteConn(ctx, db)
	} else {
		conn, err = db.Conn(ctx)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// The session may still hold the lock or an open transaction
			// (a ROLLBACK or RELEASE_LOCK that failed too): never hand it
			// back to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}()
	switch c.Dialect {
	case sqldialect.Postgres:
		return runPostgres(ctx, conn, ms, &c)
	case sqldialect.MySQL:
		return runMySQL(ctx, conn, ms, &c)
	default:
		return runSQLite(ctx, conn, ms, &c)
	}
}

func runPostgres(ctx context.Context, conn *sql.Conn, ms []Migration, c *Config) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// The lock and the schema changes commit (or roll back) together.
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock("+c.LockKey+")", c.LockArg); err != nil {
		return errors.Join(fmt.Errorf("lock: %w", err), rollback(tx))
	}
	if err := apply(ctx, tx, ms, c); err != nil {
		return errors.Join(err, rollback(tx))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rollback rolls tx back, ignoring that database/sql already did (the
// context ended).
func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}

func runMySQL(ctx context.Context, conn *sql.Conn, ms []Migration, c *Config) (err error) {
	// DDL commits implicitly in MySQL, so a session lock serialises the
	// runners instead of a transaction.
	var got sql.NullInt64
	lock := fmt.Sprintf("SELECT GET_LOCK(%s, %d)", c.LockKey, mysqlLockWait)
	if err := conn.QueryRowContext(ctx, lock, c.LockArg).Scan(&got); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("%w (GET_LOCK, %d s)", ErrLockTimeout, mysqlLockWait)
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK("+c.LockKey+")", c.LockArg); rerr != nil {
			err = errors.Join(err, fmt.Errorf("unlock: %w", rerr))
		}
	}()
	return apply(ctx, conn, ms, c)
}

// sqliteConn returns a connection of db that has begun an IMMEDIATE
// transaction. BEGIN IMMEDIATE takes the write lock up front (waiting up to
// busy_timeout), so two runners never both read "nothing applied". Opening
// the connection (its pragmas switch a new file to WAL) and the BEGIN are
// retried while SQLite answers SQLITE_BUSY, for up to sqliteSwitchWait.
func sqliteConn(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	giveUp := time.Now().Add(sqliteSwitchWait)
	pause := 5 * time.Millisecond
	for {
		conn, err := db.Conn(ctx)
		if err == nil {
			if _, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				// A session in an unknown state never goes back to the pool.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
				_ = conn.Close()
				err = fmt.Errorf("lock: %w", err)
			} else {
				return conn, nil
			}
		}
		if !sqlerr.IsRetryable(err) || ctx.Err() != nil || time.Now().After(giveUp) {
			return nil, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(err, context.Cause(ctx))
		case <-t.C:
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

func runSQLite(ctx context.Context, conn *sql.Conn, ms []Migration, c *Config) error {
	// sqliteConn began the IMMEDIATE transaction.
	if err := apply(ctx, conn, ms, c); err != nil {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", rerr))
		}
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// execQuerier is what apply needs: a *sql.Tx or a *sql.Conn.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// apply runs the migrations not yet recorded, on q, which holds the lock.
func apply(ctx context.Context, q execQuerier, ms []Migration, c *Config) error {
	if _, err := q.ExecContext(ctx, c.CreateVersionTable); err != nil {
		return fmt.Errorf("create %s: %w", c.VersionTable, err)
	}
	applied, err := versions(ctx, q, c.VersionTable)
	if err != nil {
		return fmt.Errorf("read %s: %w", c.VersionTable, err)
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		for _, stmt := range statements(m.SQL) {
			if _, err := q.ExecContext(ctx, stmt); err != nil && !(c.Dialect == sqldialect.MySQL && alreadyDone(err)) {
				return fmt.Errorf("%s: %w", m.File, err)
			}
		}
		query, args := c.RecordFunc(m)
		if _, err := q.ExecContext(ctx, query, args...); err != nil {
			return fmt.Errorf("record %s in %s: %w", m.File, c.VersionTable, err)
		}
	}
	return nil
}

// alreadyDone reports whether err is MySQL refusing to create what
// exists: a table (1050), a column (1060) or an index (1061). MySQL
// commits each DDL statement on its own, so a run that died (or, on
// Galera, lost a race with another node) after such a statement and before
// recording its version leaves it applied; the next run counts it as
// applied rather than failing on it for ever. MySQL has no ADD COLUMN IF
// NOT EXISTS, so a migration cannot say this itself.
func alreadyDone(err error) bool {
	n, ok := sqlerr.MySQLNumber(err)
	return ok && (n == 1050 || n == 1060 || n == 1061)
}

func versions(ctx context.Context, q execQuerier, table string) (map[int]bool, error) {
	rows, err := q.QueryContext(ctx, "SELECT version FROM "+table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

// statements splits a migration at the semicolons that end a line, dropping
// blank lines and lines that are only a "--" comment.
func statements(text string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(text) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}

// configError is the *idem.ConfigError of package sqlmigrate.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "sqlmigrate", Field: field, Reason: reason}
}
