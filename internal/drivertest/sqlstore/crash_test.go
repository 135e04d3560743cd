package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// The crash child is this test binary re-executed with crashChildEnv set
// to "dialect|dsn|table|biz table|key id|mode". It claims the key, inserts
// the business row and calls CompleteTx in one transaction, then, in mode
// "before", announces READY with the transaction still open, or, in mode
// "after", commits first; then it waits to be SIGKILLed.
const crashChildEnv = "IDEM_SQLSTORE_CRASH_CHILD"

const crashLease = 300 * time.Millisecond

func crashReq(id string) idem.BeginRequest {
	return idem.BeginRequest{Key: idem.MustKey("crash", id), Fingerprint: idem.FingerprintOf([]byte(id)), Lease: crashLease, Retention: time.Hour}
}

func crashChild() int {
	parts := strings.Split(os.Getenv(crashChildEnv), "|")
	if len(parts) != 6 {
		fmt.Fprintln(os.Stderr, "bad", crashChildEnv)
		return 2
	}
	die := func(err error) int { fmt.Fprintln(os.Stderr, "crash child:", err); return 1 }
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
	ctx := context.Background()
	req := crashReq(parts[4])
	c, err := s.Begin(ctx, req)
	if err != nil || c.Outcome != idem.Acquired {
		return die(fmt.Errorf("Begin = %v, %v", c.Outcome, err))
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return die(err)
	}
	if _, err := tx.ExecContext(ctx, insertBiz(d, parts[3]), parts[4], int64(c.Owner.Fence)); err != nil {
		return die(err)
	}
	if err := s.CompleteTx(ctx, tx, c.Owner, []byte("receipt-"+strconv.FormatUint(c.Owner.Fence, 10))); err != nil {
		return die(err)
	}
	if parts[5] == "after" {
		if err := tx.Commit(); err != nil {
			return die(err)
		}
	}
	fmt.Println("READY")
	time.Sleep(time.Minute) // the parent kills us long before
	return 3
}

// A process that dies (SIGKILL) right before or right after committing its
// business change together with CompleteTx leaves either both (the retry
// replays) or neither (the retry takes over and runs it): never a business
// row without a completed record.
func TestCrashAroundCompleteTx(t *testing.T) {
	for _, b := range backends {
		for _, mode := range []string{"before", "after"} {
			t.Run(b.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				db, dsn := b.open(t)
				s := newStore(t, b, db)
				biz := bizTable(t, db)
				id := testenv.Name("order")

				env := crashChildEnv + "=" + strings.Join([]string{b.dialect.String(), dsn, storeTable(s), biz, id, mode}, "|")
				if rest := testenv.KillAtLine(t, "READY", time.Minute, []string{env}, "-test.run=^$"); rest != "" {
					t.Fatalf("child said READY%s, want READY", rest)
				}

				// After the lease, the key is either completed with the
				// business row, or free with none.
				req := crashReq(id)
				var (
					c   idem.Claim
					err error
				)
				for deadline := time.Now().Add(20 * time.Second); ; {
					c, err = s.Begin(ctxT(t), req)
					if err != nil {
						t.Fatalf("Begin after the crash: %v", err)
					}
					if c.Outcome != idem.InFlight {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("claim of the killed child never became free")
					}
					time.Sleep(20 * time.Millisecond)
				}
				rows := countBiz(t, b.dialect, db, biz, id)
				switch {
				case rows == 1 && c.Outcome == idem.Replay && strings.HasPrefix(string(c.Result), "receipt-"):
					if mode == "before" {
						t.Fatalf("killed before commit, yet the business row and the completion are durable")
					}
				case rows == 0 && c.Outcome == idem.Acquired && c.Takeover:
					if mode == "after" {
						t.Fatalf("killed after commit, yet neither the business row nor the completion survived")
					}
				default:
					t.Fatalf("after the crash: %d business rows, Begin = %v (takeover %v): business change and record disagree", rows, c.Outcome, c.Takeover)
				}
			})
		}
	}
}
