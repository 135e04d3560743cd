package natsoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the child opens its database by driver name
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

const childEnv = "IDEM_NATSOUTBOX_CRASH_CHILD"

// stallAfterConfirm passes batches through to the real publisher and, on
// the stall-th batch, announces that the broker confirmed it and hangs
// before the relay can mark it: the parent SIGKILLs the process there.
type stallAfterConfirm struct {
	pub   outbox.Publisher
	stall int
	n     int
}

func (s *stallAfterConfirm) Publish(ctx context.Context, b []outbox.Message) []error {
	errs := s.pub.Publish(ctx, b)
	s.n++
	if s.n == s.stall {
		ok, first := 0, error(nil)
		for _, e := range errs {
			if e == nil {
				ok++
			} else if first == nil {
				first = e
			}
		}
		fmt.Println("CONFIRMED", ok, "first error:", first)
		time.Sleep(time.Hour)
	}
	return errs
}

// crashChild is a relay process: it runs passes until the stall, or until
// nothing is left ("DRAINED").
func crashChild() {
	fail := func(err error) { fmt.Println("ERR", err); os.Exit(2) }
	d := outbox.Postgres
	driver := "pgx"
	if os.Getenv("IDEM_DIALECT") == "mysql" {
		d, driver = outbox.MySQL, "mysql"
	}
	db, err := sql.Open(driver, os.Getenv("IDEM_DSN"))
	if err != nil {
		fail(err)
	}
	ob, err := outbox.New(db, &outbox.Config{Dialect: d, Table: os.Getenv("IDEM_TABLE")})
	if err != nil {
		fail(err)
	}
	nc, err := nats.Connect(os.Getenv("IDEM_NATS"))
	if err != nil {
		fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		fail(err)
	}
	np, err := natsoutbox.New(js, nil)
	if err != nil {
		fail(err)
	}
	stall, _ := strconv.Atoi(os.Getenv("IDEM_STALL"))
	r, err := ob.NewRelay(&stallAfterConfirm{pub: np, stall: stall}, &outbox.RelayConfig{BatchSize: 250})
	if err != nil {
		fail(err)
	}
	for idle := 0; ; {
		n, err := r.RunOnce(context.Background())
		if err != nil {
			fail(err)
		}
		if n > 0 {
			idle = 0
			continue
		}
		// Nothing claimable: either all is sent, or another relay holds
		// the heads of the keys. Only the former is "drained".
		var pending int
		if err := db.QueryRow(`SELECT COUNT(*) FROM ` + os.Getenv("IDEM_TABLE") + ` WHERE state = 0`).Scan(&pending); err != nil {
			fail(err)
		}
		if pending == 0 {
			fmt.Println("DRAINED")
			time.Sleep(time.Hour)
		}
		// The other relay may be stalled on the heads of every key: say
		// so, so the parent does not wait for a stall that cannot come.
		if idle++; idle == 10 {
			fmt.Println("IDLE")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCrashBetweenConfirmAndMark runs two relay processes at a time and
// SIGKILLs each right after JetStream confirmed a batch and before it marked
// the batch sent, again and again, with the outbox on PostgreSQL and on
// MariaDB. A later relay publishes that batch again; the stream's duplicate
// window is kept short (100 ms) so repeats reach the consumer, whose inbox
// must apply every message exactly once, per key in commit order.
//
// Sized at 3,000 messages over 300 keys (ten per key) per database so the
// test stays short under -race on CI; it logs the number of kills.
// IDEM_OUTBOX_STORM=10000 runs a storm of that many messages instead
// (still ten per key), e.g. on PostgreSQL only:
//
//	IDEM_OUTBOX_STORM=10000 go test -count=1 -v -run 'CrashBetweenConfirmAndMark/postgres' ./natsoutbox/
func TestCrashBetweenConfirmAndMark(t *testing.T) {
	t.Parallel()
	for _, d := range []outbox.Dialect{outbox.Postgres, outbox.MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			crashRelays(t, d)
		})
	}
}

func crashRelays(t *testing.T, d outbox.Dialect) {
	url := testenv.NATS.Need(t)
	p := newPipeline(t, url, jetstream.MemoryStorage, 100*time.Millisecond, d)
	n := 3000
	if v := os.Getenv("IDEM_OUTBOX_STORM"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("IDEM_OUTBOX_STORM=%q: want a number of messages, at least 100", v)
		}
	}
	keys := n / 10
	p.enqueue(t, 0, n, keys)
	p.consume(t)
	env := []string{childEnv + "=1", "IDEM_DSN=" + p.dsn, "IDEM_TABLE=" + p.table, "IDEM_NATS=" + url, "IDEM_DIALECT=" + d.String()}
	kills := 0
	for round := 0; ; round++ {
		if round > 100+n/30 {
			t.Fatal("the relays made no progress")
		}
		// Two relays at once, each killed at its own stall.
		var children []*testenv.Child
		for range 2 {
			children = append(children, testenv.StartChild(t, append(env, "IDEM_STALL="+strconv.Itoa(1+rand.IntN(4))), "-test.run=^$"))
		}
		// Each is killed as soon as it reports, whatever the order: a
		// relay stalled while holding its batch's row locks must not stay
		// alive while the test waits for the other one, which may be
		// queued behind those locks (on MariaDB it was, until its pass
		// timed out).
		drained := false
		// A guard against a hang only: a child prints one line, after
		// its first passes, which take long on a busy machine.
		deadline := time.Now().Add(adaptertest.StallTimeout)
		for live := len(children); live > 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%d relay processes printed nothing within %v", live, adaptertest.StallTimeout)
			}
			for i, c := range children {
				if c == nil {
					continue
				}
				line, ok := c.LineWithin("", 50*time.Millisecond)
				if !ok {
					continue
				}
				c.Kill()
				children[i] = nil
				live--
				switch {
				case line == "DRAINED":
					drained = true
				case line == "IDLE":
				case strings.HasPrefix(line, "CONFIRMED"):
					kills++
				default:
					t.Fatalf("child: %s", line)
				}
			}
		}
		if drained {
			break
		}
	}
	if kills < 3 {
		t.Fatalf("only %d kills between confirm and mark", kills)
	}
	// A relay killed while another drained may have left a batch pending:
	// one more relay, in process, finishes it.
	np, err := natsoutbox.New(p.js, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.ob.NewRelay(np, nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := r.RunOnce(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if m == 0 {
			break
		}
	}
	p.checkEffects(t, n)
	var open int
	if err := p.odb.QueryRowContext(ctxT(t), `SELECT COUNT(*) FROM `+p.table+` WHERE state <> 1`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d messages not sent (%v)", open, err)
	}
	t.Logf("%d messages, %d relay processes SIGKILLed between confirm and mark", n, kills)
}
