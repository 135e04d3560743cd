package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/sqlstore"
)

// defaultTable is the records table of an SQL store without --table.
const defaultTable = sqlstore.DefaultTable

// sqlIdentifier is what --table accepts: sqlstore's Config.Table rule.
var sqlIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,47}$`)

// openStore parses and opens a DSN and prepares it: the schema for SQL
// stores (a SQLite file is created if missing), the eviction-policy check
// for Redis. proxy and migrate use it.
func openStore(ctx context.Context, dsn string) (*storeurl.Handle, error) {
	return openStoreMode(ctx, dsn, true)
}

// openExistingStore is openStore for commands that only look at records
// (keys get, list, purge): a SQLite file that does not exist is an error,
// not a new empty database.
func openExistingStore(ctx context.Context, dsn string) (*storeurl.Handle, error) {
	return openStoreMode(ctx, dsn, false)
}

// defaultStore is the store of idem proxy, migrate and keys without
// --store or IDEM_STORE.
const defaultStore = "sqlite:idem.db"

// storeFlagUsage is the --store flag's help in migrate and keys. The
// default is not printed from IDEM_STORE, which may hold a password.
const storeFlagUsage = "the store `DSN` (default $IDEM_STORE, else " + defaultStore + ": the store idem proxy uses; an SQL store's table is $IDEM_TABLE, else " + defaultTable + "); see 'idem help'"

// storeDSN is the store a command uses: --store, else IDEM_STORE, else
// the proxy's default.
func storeDSN(flagValue string) string { return storeDSNEnv(flagValue, os.Getenv) }

func storeDSNEnv(flagValue string, getenv func(string) string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := strings.TrimSpace(getenv("IDEM_STORE")); v != "" {
		return v
	}
	return defaultStore
}

func openStoreMode(ctx context.Context, dsn string, create bool) (*storeurl.Handle, error) {
	dsn = storeDSN(dsn)
	d, err := parseStoreDSN(dsn)
	if err != nil {
		return nil, err
	}
	if t := strings.TrimSpace(os.Getenv("IDEM_TABLE")); t != "" && (d.Kind == storeurl.SQLite || d.Kind == storeurl.Postgres || d.Kind == storeurl.MySQL) {
		if !sqlIdentifier.MatchString(t) {
			return nil, usageErr("IDEM_TABLE=%q: want a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 characters)", t)
		}
		d.Table = t // the table idem proxy --table (IDEM_TABLE) uses
	}
	if d.Kind == storeurl.SQLite {
		if err := checkSQLiteFile(d, create); err != nil {
			return nil, err
		}
	}
	h, err := storeurl.Open(d)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h.Prepare(pctx); err != nil {
		_ = h.Close() // the Prepare error is the one to report
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return h, nil
}

// parseStoreDSN is storeurl.Parse that also accepts MySQL DSNs in
// go-sql-driver's own form, user:pass@tcp(host:port)/db, the form the
// tests' IDEM_TEST_MYSQL uses.
func parseStoreDSN(dsn string) (storeurl.DSN, error) {
	if !strings.Contains(dsn, "://") && (strings.Contains(dsn, "@tcp(") || strings.HasPrefix(dsn, "tcp(") ||
		strings.Contains(dsn, "@unix(") || strings.HasPrefix(dsn, "unix(")) {
		u, err := mysqlURL(dsn)
		if err != nil {
			return storeurl.DSN{}, err
		}
		dsn = u
	}
	return storeurl.Parse(dsn)
}

// mysqlURL turns a go-sql-driver DSN into the mysql:// form. Its errors
// never repeat the DSN, which may hold a password.
func mysqlURL(dsn string) (string, error) {
	const want = "use mysql://user:pass@host:port/db (or user:pass@tcp(host:port)/db)"
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("store: not a valid MySQL DSN; %s", want)
	}
	if cfg.Net != "tcp" {
		return "", fmt.Errorf("store: MySQL over %q is not supported; %s", cfg.Net, want)
	}
	if cfg.DBName == "" {
		return "", fmt.Errorf("store: the MySQL DSN names no database; %s", want)
	}
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
	switch {
	case cfg.Passwd != "":
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	case cfg.User != "":
		u.User = url.User(cfg.User)
	}
	// The parameters pass as they were written: the mysql:// form takes
	// the same ones.
	if _, query, ok := strings.Cut(dsn[strings.LastIndex(dsn, "/"):], "?"); ok {
		u.RawQuery = query
	}
	return u.String(), nil
}

// checkSQLiteFile opens the database file the way SQLite will, so that a
// failure names the path and the operating system's reason instead of
// SQLite's "unable to open database file" at the first statement.
func checkSQLiteFile(d storeurl.DSN, create bool) error {
	path := strings.TrimPrefix(d.String(), "sqlite:")
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		reason := err
		var pe *os.PathError
		if errors.As(err, &pe) {
			reason = pe.Err
		}
		if !create && errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store %s: cannot open %s: %w (create it with 'idem migrate --store %s')", d, path, reason, d)
		}
		return fmt.Errorf("store %s: cannot open %s: %w", d, path, reason)
	}
	st, err := f.Stat()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store %s: %s: %w", d, path, err)
	}
	if st.IsDir() {
		return fmt.Errorf("store %s: %s is a directory", d, path)
	}
	return nil
}

// closeStore closes h at the end of a command and reports a failure to
// close (pools that could not shut down cleanly) unless the command failed
// already.
func closeStore(h *storeurl.Handle, err *error) {
	if cerr := h.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("closing the store: %w", h.Wrap(cerr))
	}
}
