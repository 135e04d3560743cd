package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/outbox"
)

// TestEnqueueCommitRollback: a committed message is published once with its
// fields, a rolled-back one never; migrating again is a no-op.
func TestEnqueueCommitRollback(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			ctx := ctxT(t)
			if err := f.ob.Migrate(ctx); err != nil {
				t.Fatalf("second migrate: %v", err)
			}
			f.enqueue(t, msg("a", "k"), msg("b", ""))
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.ob.Enqueue(ctx, tx, msg("rolled-back", "k")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			// A duplicate ID is refused in its transaction.
			tx, err = f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.ob.Enqueue(ctx, tx, msg("a", "k")); !errors.Is(err, outbox.ErrDuplicateID) {
				t.Fatalf("duplicate id: %v, want ErrDuplicateID", err)
			}
			_ = tx.Rollback()

			rec := newRecorder()
			obs := &counter{}
			r, err := f.ob.NewRelay(rec, &outbox.RelayConfig{Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			drain(t, r)
			got, count, _ := rec.snapshot()
			if len(got) != 2 || count["a"] != 1 || count["b"] != 1 {
				t.Fatalf("published %v, want a and b once", count)
			}
			for _, m := range got {
				if string(m.Payload) != "p-"+m.ID || m.Headers["k"] != m.ID || m.Destination != "orders" {
					t.Fatalf("message %+v lost a field", m)
				}
			}
			if p, _, _ := obs.get(); p != 2 {
				t.Fatalf("observer published %d, want 2", p)
			}
			in, err := f.ob.Get(ctx, "a")
			if err != nil || in.State != outbox.Sent || in.Attempts != 1 || in.OrderingKey != "k" {
				t.Fatalf("Get(a) = %+v, %v", in, err)
			}
			if lag, err := f.ob.Lag(ctx); err != nil || lag != 0 {
				t.Fatalf("Lag = %v, %v; want 0 with nothing pending", lag, err)
			}
		})
	}
}

func TestEnqueueRefusesInvalid(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends()[2])
	ctx := ctxT(t)
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	long := string(make([]byte, 256))
	for _, m := range []outbox.Message{{Destination: "d"}, {ID: "x"}, {ID: long, Destination: "d"}, {ID: "x", Destination: "d", OrderingKey: "\xff"}} {
		if err := f.ob.Enqueue(ctx, tx, m); !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Fatalf("Enqueue(%q/%q/%q) = %v, want ErrInvalidMessage", m.ID, m.Destination, m.OrderingKey, err)
		}
	}
}

// TestConcurrentRelaysKeepKeyOrder: writers enqueue for a few hot keys
// while three relays run. Each business transaction bumps a per-key counter
// before enqueueing, so the counter is the commit order; every message must
// be published, at most one per key in flight, in counter order per key.
func TestConcurrentRelaysKeepKeyOrder(t *testing.T) {
	t.Parallel()
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			ctx := ctxT(t)
			biz := f.table + "_biz"
			if _, err := f.db.ExecContext(ctx, `CREATE TABLE `+biz+` (k VARCHAR(20) PRIMARY KEY, n INT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			const keys, writers, perWriter = 8, 4, 40
			for k := range keys {
				if _, err := f.db.ExecContext(ctx, `INSERT INTO `+biz+` VALUES ('k`+strconv.Itoa(k)+`', 0)`); err != nil {
					t.Fatal(err)
				}
			}
			rec := newRecorder()
			var relays []*outbox.Relay
			for range 3 {
				r, err := f.ob.NewRelay(rec, &outbox.RelayConfig{BatchSize: 16, PollInterval: 5 * time.Millisecond, Retention: -1})
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Start(ctx); err != nil {
					t.Fatal(err)
				}
				relays = append(relays, r)
			}
			p := b.dialect.Placeholder
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWriter {
						key := "k" + strconv.Itoa((w+i)%keys)
						if err := writeOne(ctx, f, biz, key, fmt.Sprintf("w%d-%d", w, i), p); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			f.waitSent(t, "every message sent", writers*perWriter)
			for _, r := range relays {
				if err := r.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				if err := r.Stop(ctx); err != nil {
					t.Fatalf("second Stop: %v", err)
				}
			}
			got, count, _ := rec.snapshot()
			if rec.violation != "" {
				t.Fatal(rec.violation)
			}
			if len(count) != writers*perWriter {
				t.Fatalf("%d distinct messages published, want %d", len(count), writers*perWriter)
			}
			last := map[string]int{}
			for _, m := range got {
				n, _ := strconv.Atoi(string(m.Payload))
				if n != last[m.OrderingKey]+1 {
					t.Fatalf("key %s: published #%d after #%d", m.OrderingKey, n, last[m.OrderingKey])
				}
				last[m.OrderingKey] = n
			}
		})
	}
}

func writeOne(ctx context.Context, f *fixture, biz, key, id string, p func(int) string) (err error) {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback())
		}
	}()
	if _, err = tx.ExecContext(ctx, `UPDATE `+biz+` SET n = n + 1 WHERE k = `+p(1), key); err != nil {
		return err
	}
	var n int
	if err = tx.QueryRowContext(ctx, `SELECT n FROM `+biz+` WHERE k = `+p(1), key).Scan(&n); err != nil {
		return err
	}
	if err = f.ob.Enqueue(ctx, tx, outbox.Message{ID: id, Destination: "d", OrderingKey: key, Payload: []byte(strconv.Itoa(n))}); err != nil {
		return err
	}
	return tx.Commit()
}

// TestParkedBlocksOnlyItsKey: a refused message is parked with its reason
// and counted; other keys go on; its own key waits until an operator acts.
func TestParkedBlocksOnlyItsKey(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			ctx := ctxT(t)
			f.enqueue(t, msg("bad", "A"), msg("a2", "A"), msg("b1", "B"), msg("free", ""))
			rec := newRecorder()
			rec.refuse["bad"] = true
			obs := &counter{}
			r, err := f.ob.NewRelay(rec, &outbox.RelayConfig{Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			drain(t, r)
			_, count, _ := rec.snapshot()
			if count["b1"] != 1 || count["free"] != 1 || count["a2"] != 0 || count["bad"] != 0 {
				t.Fatalf("published %v: want b1 and free, not a2 (behind the parked one)", count)
			}
			if _, _, parked := obs.get(); parked != 1 {
				t.Fatalf("observer parked %d, want 1", parked)
			}
			list, err := f.ob.Parked(ctx, 10)
			if err != nil || len(list) != 1 || list[0].ID != "bad" || list[0].State != outbox.Parked || list[0].Reason == "" {
				t.Fatalf("Parked = %+v, %v", list, err)
			}
			// The operator fixes the cause and requeues: both go, in order.
			rec.mu.Lock()
			rec.refuse["bad"] = false
			rec.mu.Unlock()
			if err := f.ob.Requeue(ctx, "bad"); err != nil {
				t.Fatal(err)
			}
			if err := f.ob.Requeue(ctx, "bad"); !errors.Is(err, outbox.ErrNotFound) {
				t.Fatalf("second Requeue: %v, want ErrNotFound", err)
			}
			drain(t, r)
			got, count, _ := rec.snapshot()
			if count["bad"] != 1 || count["a2"] != 1 || got[len(got)-1].ID != "a2" {
				t.Fatalf("after requeue: %v", count)
			}
		})
	}
}

// TestDiscardReleasesKey: discarding a parked message lets the next one of
// its key go; the sweeper deletes finished rows only.
func TestDiscardAndSweep(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			ctx := ctxT(t)
			f.enqueue(t, msg("bad", "A"), msg("a2", "A"), msg("bad2", "C"), msg("c2", "C"))
			rec := newRecorder()
			rec.refuse["bad"], rec.refuse["bad2"] = true, true
			r, err := f.ob.NewRelay(rec, nil)
			if err != nil {
				t.Fatal(err)
			}
			drain(t, r)
			if err := f.ob.Discard(ctx, "bad"); err != nil {
				t.Fatal(err)
			}
			drain(t, r)
			if _, count, _ := rec.snapshot(); count["a2"] != 1 || count["c2"] != 0 {
				t.Fatalf("published %v, want a2 (its key freed) and not c2", count)
			}
			n, err := f.ob.Sweep(ctx, 0, 1)
			if err != nil || n != 2 { // bad (discarded) and a2 (sent), one per statement
				t.Fatalf("Sweep = %d, %v; want 2", n, err)
			}
			if f.countState(t, outbox.Parked) != 1 || f.countState(t, outbox.Pending) != 1 {
				t.Fatal("the sweeper touched an open row")
			}
			if n, err := f.ob.Sweep(ctx, time.Hour, 100); err != nil || n != 0 {
				t.Fatalf("Sweep(1h) = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestBrokerAwayBacksOff: while every publish fails, messages are retried
// (counted) with growing waits instead of a tight loop, and nothing is lost.
func TestBrokerAwayBacksOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends()[0])
	ctx := ctxT(t)
	for i := range 20 {
		f.enqueue(t, msg("m"+strconv.Itoa(i), "k"+strconv.Itoa(i%3)))
	}
	rec := newRecorder()
	rec.away = true
	obs := &counter{}
	r, err := f.ob.NewRelay(rec, &outbox.RelayConfig{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, PollInterval: time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "retries", func() bool { _, retried, _ := obs.get(); return retried >= 30 })
	time.Sleep(time.Second) // the outage goes on
	_, _, calls := rec.snapshot()
	rec.mu.Lock()
	rec.away = false
	rec.mu.Unlock()
	waitFor(t, "catch-up", func() bool { return f.countState(t, outbox.Sent) == 20 })
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// A spinning relay makes thousands of calls in that second; backing off
	// with waits of at least 100 ms it makes at most a few per key (3) each.
	if calls > 200 {
		t.Fatalf("%d publish calls during the outage: the relay spins", calls)
	}
	if _, count, _ := rec.snapshot(); len(count) != 20 {
		t.Fatalf("%d messages published after the outage, want 20", len(count))
	}
}

// TestSQLiteSingleRelayLease: on SQLite a second relay waits while the
// first holds the lease, and takes over once it stops.
func TestSQLiteSingleRelayLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends()[2])
	ctx := ctxT(t)
	f.enqueue(t, msg("a", "k"))
	rec := newRecorder()
	r1, _ := f.ob.NewRelay(rec, nil)
	r2, _ := f.ob.NewRelay(rec, nil)
	if _, err := r1.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	f.enqueue(t, msg("b", "k"))
	if _, err := r2.RunOnce(ctx); !errors.Is(err, outbox.ErrNotLeader) {
		t.Fatalf("second relay: %v, want ErrNotLeader", err)
	}
	if err := r1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	drain(t, r2)
	if _, count, _ := rec.snapshot(); count["a"] != 1 || count["b"] != 1 {
		t.Fatalf("published %v", count)
	}

	// A holder that dies without stopping (r3 never renews) is replaced
	// once its lease has run out. The lease is long enough that r4's first
	// try still falls inside it on a loaded machine (r3's pass and r4's
	// try take a few SQLite statements each).
	r3, _ := f.ob.NewRelay(rec, &outbox.RelayConfig{Lease: 3 * time.Second})
	r4, _ := f.ob.NewRelay(rec, nil)
	// r2 only ran RunOnce (no Stop to release its lease): free it by hand.
	if _, err := f.db.ExecContext(ctx, `DELETE FROM `+f.table+`_lease`); err != nil {
		t.Fatal(err)
	}
	f.enqueue(t, msg("c", "k"))
	if _, err := r3.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r4.RunOnce(ctx); !errors.Is(err, outbox.ErrNotLeader) {
		t.Fatalf("while r3's lease runs: %v, want ErrNotLeader", err)
	}
	waitFor(t, "r3's lease to run out", func() bool {
		_, err := r4.RunOnce(ctx)
		return !errors.Is(err, outbox.ErrNotLeader)
	})
	drain(t, r4)
	if _, count, _ := rec.snapshot(); count["c"] != 1 {
		t.Fatalf("published %v", count)
	}
}
