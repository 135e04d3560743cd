package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/sqlstore"
)

// outboxDB is a database for the outbox tests: the pool the test writes
// with and the DSN the binary is given.
type outboxDB struct {
	name string
	db   *sql.DB
	d    outbox.Dialect
	dsn  string
}

func outboxDBs(t *testing.T) []outboxDB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shop.db")
	lite, err := sql.Open("sqlite", sqlstore.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	pg, pgDSN := testenv.PostgresDB(t)
	my, myDSN := testenv.MySQLDB(t)
	return []outboxDB{
		{"sqlite", lite, outbox.SQLite, "sqlite:" + path},
		{"postgres", pg, outbox.Postgres, pgDSN},
		{"mariadb", my, outbox.MySQL, myDSN},
	}
}

// runBin runs the real idem binary with env added to the environment (and
// IDEM_STORE removed unless env sets it).
func runBin(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemBin, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "IDEM_STORE=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("idem %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// publisherFunc decides each message's publish.
type publisherFunc func(m outbox.Message) error

func (f publisherFunc) Publish(_ context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	for i, m := range batch {
		errs[i] = f(m)
	}
	return errs
}

// drain runs r's passes until one claims nothing.
func drain(t *testing.T, r *outbox.Relay) {
	t.Helper()
	for range 20 {
		n, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("the relay still claims messages after 20 passes")
}

// End to end with the real binary: idem migrate --outbox creates the
// tables; a broker that refuses parks two messages (holding back the
// next message of one key); idem outbox lists and shows them; requeue
// makes one pending, and the relay publishes it and then the message it
// held back, in order; discard gives the other up; the commands refuse
// messages in the wrong state.
func TestE2EOutboxParkRequeueDiscard(t *testing.T) {
	t.Parallel()
	for _, tc := range outboxDBs(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			for range 2 { // again: changes nothing
				code, out, errs := runBin(t, nil, "migrate", "--outbox", "--store", tc.dsn)
				if code != 0 || !strings.Contains(out, "outbox idem_outbox is ready") {
					t.Fatalf("migrate --outbox: exit %d\n%s%s", code, out, errs)
				}
			}
			ob, err := outbox.New(tc.db, &outbox.Config{Dialect: tc.d})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := tc.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []outbox.Message{
				{ID: "order-1/paid", Destination: "ORDERS.paid", OrderingKey: "order-1", Payload: []byte("1")},
				{ID: "order-1/shipped", Destination: "ORDERS.shipped", OrderingKey: "order-1", Payload: []byte("2")},
				{ID: "order-2/paid", Destination: "ORDERS.paid", OrderingKey: "order-2", Payload: []byte("3")},
			} {
				if err := ob.Enqueue(ctx, tx, m); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			// One relay (on SQLite it holds the lease): the broker refuses,
			// then, after the operator's fix, accepts.
			var mu sync.Mutex
			var published []string
			refuse := true
			relay, err := ob.NewRelay(publisherFunc(func(m outbox.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if refuse {
					return outbox.PermanentAs(outbox.ReasonTooLarge, errors.New("message too large for stream ORDERS"))
				}
				published = append(published, m.ID)
				return nil
			}), &outbox.RelayConfig{Retention: -1})
			if err != nil {
				t.Fatal(err)
			}
			drain(t, relay)

			code, out, errs := runBin(t, nil, "outbox", "list", "--store", tc.dsn, "--json")
			if code != 0 {
				t.Fatalf("outbox list --json: exit %d %s", code, errs)
			}
			var listed []messageView
			if err := json.Unmarshal([]byte(out), &listed); err != nil {
				t.Fatalf("list --json: %v\n%s", err, out)
			}
			if len(listed) != 2 || listed[0].ID != "order-1/paid" || listed[1].ID != "order-2/paid" {
				t.Fatalf("parked: %+v", listed)
			}
			for _, v := range listed {
				if v.State != "parked" || v.Attempts != 1 || !strings.Contains(v.Reason, "message too large") || v.ReasonClass != "too_large" || v.Destination != "ORDERS.paid" {
					t.Errorf("parked message %+v", v)
				}
			}
			// The text form, the store from IDEM_STORE.
			code, out, errs = runBin(t, []string{"IDEM_STORE=" + tc.dsn}, "outbox", "list")
			if code != 0 || !strings.Contains(out, "2 parked messages") || !strings.Contains(out, "order-2/paid") || !strings.Contains(out, "message too large") || !strings.Contains(out, "CLASS") || !strings.Contains(out, "too_large") {
				t.Fatalf("outbox list (IDEM_STORE): exit %d\n%s%s", code, out, errs)
			}
			code, out, _ = runBin(t, nil, "outbox", "show", "--store", tc.dsn, "order-1/shipped")
			if code != 0 || !strings.Contains(out, "state:         pending") || !strings.Contains(out, "ordering key:  order-1") {
				t.Fatalf("show the held-back message: exit %d\n%s", code, out)
			}

			if code, out, errs = runBin(t, nil, "outbox", "requeue", "--store", tc.dsn, "order-1/paid"); code != 0 || !strings.Contains(out, "order-1/paid requeued") {
				t.Fatalf("requeue: exit %d\n%s%s", code, out, errs)
			}
			mu.Lock()
			refuse = false
			mu.Unlock()
			drain(t, relay)
			if strings.Join(published, " ") != "order-1/paid order-1/shipped" {
				t.Fatalf("published after the requeue: %v, want order-1/paid then the message it held back", published)
			}
			if code, out, errs = runBin(t, nil, "outbox", "discard", "--store", tc.dsn, "order-2/paid"); code != 0 || !strings.Contains(out, "order-2/paid discarded") {
				t.Fatalf("discard: exit %d\n%s%s", code, out, errs)
			}
			code, out, _ = runBin(t, nil, "outbox", "show", "--json", "--store", tc.dsn, "order-2/paid")
			var shown messageView
			if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.State != "discarded" {
				t.Fatalf("show --json after discard: exit %d %v %s", code, err, out)
			}
			for _, bad := range []struct {
				args []string
				want string
			}{
				{[]string{"requeue", "order-1/paid"}, `message "order-1/paid" is sent, not parked`},
				{[]string{"discard", "order-2/paid"}, `message "order-2/paid" is discarded, not pending or parked`},
				{[]string{"requeue", "nope"}, `no message with ID "nope"`},
				{[]string{"show", "nope"}, `no message with ID "nope"`},
				{[]string{"requeue", "order-1/shipped", "nope"}, "2 of 2 not requeued"},
			} {
				code, out, errs := runBin(t, nil, append(append([]string{"outbox"}, bad.args...), "--store", tc.dsn)...)
				if code != 1 || !strings.Contains(errs, bad.want) || strings.Count(errs, "\n") != 1 {
					t.Errorf("outbox %v: exit %d, stderr %q (want %q on one line), stdout %q", bad.args, code, errs, bad.want, out)
				}
			}
			if code, out, _ = runBin(t, nil, "outbox", "list", "--store", tc.dsn); code != 0 || !strings.Contains(out, "0 parked messages") {
				t.Fatalf("list at the end: exit %d\n%s", code, out)
			}
			if in, err := ob.Get(ctx, "order-1/shipped"); err != nil || in.State != outbox.Sent {
				t.Fatalf("order-1/shipped: %+v %v", in, err)
			}
		})
	}
}

// idem migrate --outbox on each SQL database: a custom table, run from
// several processes at once, and again; the tables work afterwards.
func TestMigrateOutbox(t *testing.T) {
	t.Parallel()
	for _, tc := range outboxDBs(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var wg sync.WaitGroup
			codes := make([]int, 3)
			outs := make([]string, 3)
			for i := range codes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var errs string
					codes[i], outs[i], errs = runBin(t, nil, "migrate", "--outbox", "--outbox-table", "shop_outbox", "--store", tc.dsn)
					outs[i] += errs
				}()
			}
			wg.Wait()
			for i, c := range codes {
				if c != 0 || !strings.Contains(outs[i], "outbox shop_outbox is ready (schema version 2)") {
					t.Fatalf("concurrent migrate %d: exit %d\n%s", i, c, outs[i])
				}
			}
			var n int
			if err := tc.db.QueryRow(`SELECT COUNT(*) FROM shop_outbox_migrations`).Scan(&n); err != nil || n != 2 {
				t.Fatalf("applied migrations: %d %v, want 2", n, err)
			}
			ob, err := outbox.New(tc.db, &outbox.Config{Dialect: tc.d, Table: "shop_outbox"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			tx, err := tc.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := ob.Enqueue(ctx, tx, outbox.Message{ID: "m1", Destination: "d", OrderingKey: "k"}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			code, out, errs := runBin(t, nil, "outbox", "show", "--table", "shop_outbox", "--store", tc.dsn, "m1")
			if code != 0 || !strings.Contains(out, "state:         pending") {
				t.Fatalf("show in the migrated table: exit %d\n%s%s", code, out, errs)
			}
			// The default table was not created: the command says how.
			code, _, errs = runBin(t, nil, "outbox", "list", "--store", tc.dsn)
			if code != 1 || !strings.Contains(errs, "cannot read the outbox table idem_outbox") || !strings.Contains(errs, "idem migrate --outbox") {
				t.Fatalf("list without the table: exit %d %q", code, errs)
			}
		})
	}
}

// Bad command lines are usage errors (exit 2); a missing SQLite file is
// not created; a password in the DSN is never printed.
func TestOutboxCommandErrors(t *testing.T) {
	t.Parallel()
	missing := "sqlite:" + filepath.Join(t.TempDir(), "none.db")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"outbox", "list", "--store", "memory:"}, 2, "an outbox lives in a SQL database"},
		{[]string{"outbox", "list", "--store", "redis://127.0.0.1:1/0"}, 2, "an outbox lives in a SQL database"},
		{[]string{"outbox", "requeue", "--store", missing}, 2, "want one or more message IDs"},
		{[]string{"outbox", "show", "--store", missing}, 2, "want exactly one message ID"},
		{[]string{"outbox", "list", "--limit", "0", "--store", missing}, 2, "--limit must be positive"},
		{[]string{"outbox", "list", "--table", "bad;name", "--store", "sqlite:" + filepath.Join(t.TempDir(), "x.db")}, 2, "--table"},
		{[]string{"outbox", "list", "--store", missing}, 1, "cannot open"},
		{[]string{"migrate", "--outbox", "--store", "memory:"}, 2, "--outbox needs a SQL store"},
		{[]string{"migrate", "--outbox-table", "t", "--store", missing}, 2, "give both"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("idem %v: exit %d, stderr %q; want %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	if _, err := os.Stat(strings.TrimPrefix(missing, "sqlite:")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the missing SQLite file was created: %v", err)
	}

	_, dsn := testenv.PostgresDB(t)
	withPW := strings.Replace(dsn, "postgres://postgres@", "postgres://postgres:s3cr3tpw@", 1)
	if withPW == dsn {
		t.Skip("IDEM_TEST_POSTGRES has another user; cannot add a password")
	}
	for _, args := range [][]string{
		{"outbox", "list", "--store", withPW},
		{"outbox", "requeue", "--store", withPW, "x"},
		{"migrate", "--outbox", "--outbox-table", "nosuchschema.t", "--store", withPW},
	} {
		code, out, errs := runBin(t, nil, args...)
		if code != 1 || strings.Contains(out+errs, "s3cr3tpw") || !strings.Contains(errs, "xxxxx") {
			t.Errorf("idem %v: exit %d, output %q %q: want a failure naming the store without its password", args[:2], code, out, errs)
		}
	}
}
