package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// The at-most-once child is this test binary re-executed with amoChildEnv
// set to "dialect|dsn|table|key id|point". It runs idem.Do with
// AtMostOnce and announces where it is, then waits to be SIGKILLed: at
// point "marking", just before its MarkStarted reaches the store; at point
// "acting", inside fn, after the mark.
const amoChildEnv = "IDEM_SQLSTORE_AMO_CHILD"

// pausingStore announces MarkStarted and waits instead of sending it.
type pausingStore struct{ idem.Store }

func (p pausingStore) MarkStarted(ctx context.Context, o idem.Owner) error {
	fmt.Println("MARKING")
	time.Sleep(time.Minute) // the parent kills us long before
	return p.Store.MarkStarted(ctx, o)
}

func amoChild() int {
	parts := strings.Split(os.Getenv(amoChildEnv), "|")
	if len(parts) != 5 {
		fmt.Fprintln(os.Stderr, "bad", amoChildEnv)
		return 2
	}
	die := func(err error) int { fmt.Fprintln(os.Stderr, "at-most-once child:", err); return 1 }
	d, err := sqlstore.ParseDialect(parts[0])
	if err != nil {
		return die(err)
	}
	driver := map[sqlstore.Dialect]string{sqlstore.Postgres: "pgx", sqlstore.MySQL: "mysql", sqlstore.SQLite: "sqlite"}[d]
	db, err := sql.Open(driver, parts[1])
	if err != nil {
		return die(err)
	}
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: d, Table: parts[2]})
	if err != nil {
		return die(err)
	}
	var store idem.Store = s
	if parts[4] == "marking" {
		store = pausingStore{s}
	}
	_, err = idem.Do(context.Background(), store, idem.MustKey("amo", parts[3]), &idem.Options{AtMostOnce: true, Lease: crashLease},
		func(ctx context.Context) (string, error) {
			fmt.Println("ACTING")
			time.Sleep(time.Minute)
			return "sent", nil
		})
	return die(fmt.Errorf("Do returned: %v", err))
}

// A process running at-most-once work is SIGKILLed. If it died after its
// mark reached the store, the retry does not run the work again: the key
// becomes outcome-unknown, for every retry. If it died before, the retry
// runs the work, once.
func TestCrashAtMostOnce(t *testing.T) {
	for _, b := range backends {
		for _, point := range []string{"marking", "acting"} {
			t.Run(b.name+"/"+point, func(t *testing.T) {
				t.Parallel()
				db, dsn := b.open(t)
				s := newStore(t, b, db)
				id := testenv.Name("pay")
				env := amoChildEnv + "=" + strings.Join([]string{b.dialect.String(), dsn, storeTable(s), id, point}, "|")
				want := map[string]string{"marking": "MARKING", "acting": "ACTING"}[point]
				testenv.KillAtLine(t, want, time.Minute, []string{env}, "-test.run=^$")

				var runs atomic.Int32
				fn := func(context.Context) (string, error) { runs.Add(1); return "sent by the retry", nil }
				opts := &idem.Options{AtMostOnce: true, Wait: true, Lease: crashLease}
				key := idem.MustKey("amo", id)
				for i := range 3 {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					v, err := idem.Do(ctx, s, key, opts, fn)
					cancel()
					switch point {
					case "acting":
						if !errors.Is(err, idem.ErrOutcomeUnknown) {
							t.Fatalf("retry %d after a kill inside fn = %q, %v; want ErrOutcomeUnknown", i, v, err)
						}
					case "marking":
						if err != nil || v != "sent by the retry" {
							t.Fatalf("retry %d after a kill before the mark = %q, %v; want the retry's result", i, v, err)
						}
					}
				}
				if want := map[string]int32{"marking": 1, "acting": 0}[point]; runs.Load() != want {
					t.Fatalf("the retries ran fn %d times, want %d", runs.Load(), want)
				}
			})
		}
	}
}
