package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/storeurl"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestMigrateKeysGetPurgeOnSQLite(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	if code, out, errs := runCLI(t, "migrate", "--store", dsn); code != 0 || !strings.Contains(out, "ready") {
		t.Fatalf("migrate: code %d, out %q, err %q", code, out, errs)
	}
	// Migrating again is a no-op.
	if code, _, errs := runCLI(t, "migrate", "--store", dsn); code != 0 {
		t.Fatalf("second migrate: %d %s", code, errs)
	}

	// Put one completed and one expired record into the store.
	d, err := storeurl.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	h, err := storeurl.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	live := idem.MustKey("tenant-1", "order-1")
	c, err := h.Store.Begin(ctx, idem.BeginRequest{Key: live})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Complete(ctx, c.Owner, []byte("receipt-1")); err != nil {
		t.Fatal(err)
	}
	old := idem.MustKey("tenant-1", "order-0")
	if _, err := h.Store.Begin(ctx, idem.BeginRequest{Key: old, Lease: 5 * time.Millisecond, Retention: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)

	code, out, errs := runCLI(t, "keys", "get", "--store", dsn, "--scope", "tenant-1", "--result", "order-1")
	if code != 0 {
		t.Fatalf("keys get: %d %s", code, errs)
	}
	for _, want := range []string{"state:       completed", live.Digest().String(), "result:      9 bytes", "receipt-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("keys get output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := runCLI(t, "keys", "get", "--store", dsn, "--scope", "tenant-2", "order-1"); code != 1 || !strings.Contains(errs, "no record") {
		t.Errorf("keys get in another scope: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "keys", "get", "--store", dsn, "bad key"); code != 1 || !strings.Contains(errs, "invalid key") {
		t.Errorf("keys get with a bad key: %d %q", code, errs)
	}
	if code, out, errs := runCLI(t, "keys", "purge", "--store", dsn, "--before", "1h"); code != 0 || out != "purged 0 expired records\n" {
		t.Errorf("purge --before 1h: %d %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(t, "keys", "purge", "--store", dsn); code != 0 || out != "purged 1 expired records\n" {
		t.Errorf("purge: %d %q %q", code, out, errs)
	}
	if code, _, _ := runCLI(t, "keys", "get", "--store", dsn, "--scope", "tenant-1", "order-1"); code != 0 {
		t.Errorf("purge deleted a live record")
	}
}

func TestBadInputIsOneLineWithoutPassword(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"migrate"}, 2, "--store is required"},
		{[]string{"migrate", "--store", "oracle://u:hunter22@h/db"}, 1, "unknown scheme"},
		{[]string{"migrate", "--store", "mysql://root:hunter22@127.0.0.1:1/test"}, 1, "mysql://root:xxxxx@127.0.0.1:1/test"},
		{[]string{"migrate", "--store", "postgres://u:hunter22@127.0.0.1:1/test?connect_timeout=2"}, 1, "postgres://u:xxxxx@127.0.0.1:1/test"},
		{[]string{"migrate", "--store", "redis://:hunter22@127.0.0.1:1/0"}, 1, "redis://:xxxxx@127.0.0.1:1/0"},
		{[]string{"keys"}, 2, "subcommand"},
		{[]string{"keys", "frob"}, 2, "unknown keys subcommand"},
		{[]string{"keys", "purge", "--store", "memory:", "--before", "-1h"}, 2, "must not be negative"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errs := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if !strings.Contains(errs, tt.has) {
				t.Errorf("stderr %q lacks %q", errs, tt.has)
			}
			if strings.Contains(errs, "hunter22") {
				t.Errorf("stderr leaks the password: %q", errs)
			}
		})
	}
}
