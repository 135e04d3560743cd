package main

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// idem proxy --table (IDEM_TABLE) puts the records in that table of an SQL
// store, and idem keys (IDEM_TABLE) reads the same one; a table that is
// not a plain identifier, or a table for a store that has none, is a
// usage error.
func TestProxyTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	o, err := parseProxyFlagsEnv([]string{"--upstream", "http://127.0.0.1:1", "--store", "sqlite:" + path},
		func(k string) (string, bool) {
			if k == "IDEM_TABLE" {
				return "shop_keys", true
			}
			return "", false
		}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.table != "shop_keys" {
		t.Fatalf("IDEM_TABLE: table %q, want shop_keys", o.table)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ps, err := openProxyStore(ctx, o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ps.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var names []string
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names, ","); got != "shop_keys,shop_keys_migrations,shop_keys_steps" {
		t.Errorf("tables %s, want shop_keys,shop_keys_migrations,shop_keys_steps", got)
	}

	// idem keys and migrate take the table from IDEM_TABLE.
	t.Setenv("IDEM_TABLE", "shop_keys")
	h, err := openExistingStore(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--table", "idem-records"}, "--table \"idem-records\": want a plain SQL identifier"},
		{[]string{"--table", "x; DROP TABLE y"}, "want a plain SQL identifier"},
	} {
		_, err := parseProxyFlagsEnv(append([]string{"--upstream", "http://127.0.0.1:1"}, tc.args...), func(string) (string, bool) { return "", false }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	o, err = parseProxyFlagsEnv([]string{"--upstream", "http://127.0.0.1:1", "--store", "memory:", "--table", "t"}, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openProxyStore(ctx, o, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--table applies to an SQL store") {
		t.Errorf("--table with memory: %v, want a usage error", err)
	}
}
