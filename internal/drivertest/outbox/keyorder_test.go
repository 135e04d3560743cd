package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/outbox"
)

// keyBroker is an in-memory broker that checks the per-key rules as each
// batch is handed over. A message's payload is its rank within its key
// (1, 2, 3, … in commit order). It counts batches holding two messages of
// one key, messages handed over before their key's previous rank was
// confirmed, and confirms out of rank order. failPct of the hand-overs
// fail (transiently, chosen by a hash of the ID and attempt), so that
// retries are part of the run.
type keyBroker struct {
	failPct uint32

	mu        sync.Mutex
	confirmed map[string]int // key → highest rank confirmed
	attempts  map[string]int // message ID → hand-overs
	sent      int
	twoInOne  int
	early     int
	disorder  int
	first     []string // the first few violations, for the failure message
}

func newKeyBroker(failPct uint32) *keyBroker {
	return &keyBroker{failPct: failPct, confirmed: map[string]int{}, attempts: map[string]int{}}
}

func (b *keyBroker) violate(format string, args ...any) {
	if len(b.first) < 5 {
		b.first = append(b.first, fmt.Sprintf(format, args...))
	}
}

var errFlaky = errors.New("flaky broker")

func (b *keyBroker) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	b.mu.Lock()
	seen := map[string]bool{}
	for i, m := range batch {
		rank, _ := strconv.Atoi(string(m.Payload))
		if seen[m.OrderingKey] {
			b.twoInOne++
			b.violate("batch holds two messages of key %s", m.OrderingKey)
		}
		seen[m.OrderingKey] = true
		if rank > b.confirmed[m.OrderingKey]+1 {
			b.early++
			b.violate("key %s: #%d handed over while #%d was the last confirmed", m.OrderingKey, rank, b.confirmed[m.OrderingKey])
		}
		b.attempts[m.ID]++
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%d", m.ID, b.attempts[m.ID])
		if h.Sum32()%100 < b.failPct {
			errs[i] = errFlaky
		}
	}
	b.mu.Unlock()
	time.Sleep(time.Millisecond) // a broker round trip, so that passes overlap
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, m := range batch {
		if errs[i] != nil {
			continue
		}
		rank, _ := strconv.Atoi(string(m.Payload))
		switch {
		case rank == b.confirmed[m.OrderingKey]+1:
			b.confirmed[m.OrderingKey] = rank
			b.sent++
		case rank > b.confirmed[m.OrderingKey]+1:
			b.disorder++
			b.violate("key %s: #%d confirmed after #%d", m.OrderingKey, rank, b.confirmed[m.OrderingKey])
		}
	}
	return errs
}

func (b *keyBroker) check(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.twoInOne+b.early+b.disorder > 0 {
		t.Fatalf("%d batches with two messages of one key, %d messages handed over before their predecessor was confirmed, %d confirmed out of order; first: %s",
			b.twoInOne, b.early, b.disorder, strings.Join(b.first, "; "))
	}
}

// TestSeveralMessagesOfAKeyPerTransaction: business transactions enqueue
// three messages of one key each (the shape that broke MariaDB: a claim
// returned a key's first and second message together), over 40 keys,
// while three relays with Concurrency 4 run (one on SQLite, its lease).
// 3% of the hand-overs fail and are retried. Every message is published
// once in rank order: 0 batches with two messages of a key, 0 messages
// handed over before their predecessor was confirmed, 0 out of order.
func TestSeveralMessagesOfAKeyPerTransaction(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			biz := f.table + "_biz"
			if _, err := f.db.ExecContext(ctx, `CREATE TABLE `+biz+` (k VARCHAR(20) PRIMARY KEY, n INT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			const keys, writers, perWriter = 40, 6, 120 // 2,160 messages
			for k := range keys {
				if _, err := f.db.ExecContext(ctx, `INSERT INTO `+biz+` VALUES ('k`+strconv.Itoa(k)+`', 0)`); err != nil {
					t.Fatal(err)
				}
			}
			broker := newKeyBroker(3)
			var relays []*outbox.Relay
			for range 3 {
				r, err := f.ob.NewRelay(broker, &outbox.RelayConfig{
					BatchSize: 64, Concurrency: 4, PollInterval: 2 * time.Millisecond,
					MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Retention: -1,
				})
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
						key := "k" + strconv.Itoa((w*7+i*13)%keys)
						if err := writeThree(ctx, f, biz, key, fmt.Sprintf("w%d-%d", w, i), p); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			total := 3 * writers * perWriter
			f.waitSent(t, "every message sent", total)
			for _, r := range relays {
				if err := r.Stop(ctx); err != nil {
					t.Fatal(err)
				}
			}
			broker.check(t)
			if broker.sent != total {
				t.Fatalf("%d messages confirmed in rank order, want %d", broker.sent, total)
			}
		})
	}
}

// writeThree commits one business transaction that enqueues three
// messages of key, ranked by the business row's counter (the commit
// order, since the UPDATE serializes the key's transactions).
func writeThree(ctx context.Context, f *fixture, biz, key, id string, p func(int) string) (err error) {
	for {
		err = writeThreeOnce(ctx, f, biz, key, id, p)
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return err
		}
	}
}

// retryable: a deadlock or busy database, which the business retries.
func retryable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Deadlock") || strings.Contains(s, "deadlock") || strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}

func writeThreeOnce(ctx context.Context, f *fixture, biz, key, id string, p func(int) string) (err error) {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback())
		}
	}()
	if _, err = tx.ExecContext(ctx, `UPDATE `+biz+` SET n = n + 3 WHERE k = `+p(1), key); err != nil {
		return err
	}
	var n int
	if err = tx.QueryRowContext(ctx, `SELECT n FROM `+biz+` WHERE k = `+p(1), key).Scan(&n); err != nil {
		return err
	}
	for j := 2; j >= 0; j-- {
		m := outbox.Message{ID: id + "-" + strconv.Itoa(3-j), Destination: "d", OrderingKey: key, Payload: []byte(strconv.Itoa(n - j))}
		if err = f.ob.Enqueue(ctx, tx, m); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// TestMariaDBClaimSnapshot reproduces the InnoDB claim anomaly
// deterministically: a key z has 10,000 pending messages whose head is
// locked (another relay's claim), so a claim's scan spends a while on z's
// rows, reading their predecessors in the statement's snapshot; meanwhile
// a business transaction commits two messages of a new key. The claim's
// locking read then finds both committed while its subquery's snapshot
// sees neither, and (before the fix) the pass handed both over in one
// batch. Each attempt commits at a different moment into the scan; the
// claimed batches must never hold two messages of a key.
func TestMariaDBClaimSnapshot(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends()[1])
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const backlog = 10000
	for lo := 1; lo <= backlog; lo += 1000 {
		var sb strings.Builder
		sb.WriteString(`INSERT INTO ` + f.table + ` (id, destination, ordering_key, key_seq, payload, headers, created_us, next_us) VALUES `)
		for i := lo; i < lo+1000; i++ {
			if i > lo {
				sb.WriteString(", ")
			}
			fmt.Fprintf(&sb, "('z-%d', 'd', 'z', %d, '', '{}', 0, 0)", i, i)
		}
		if _, err := f.db.ExecContext(ctx, sb.String()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.db.ExecContext(ctx, `INSERT INTO `+f.table+`_keys (ordering_key, last_seq) VALUES ('z', ?)`, backlog); err != nil {
		t.Fatal(err)
	}
	// z-1 is z's head, as Enqueue would have marked it.
	if _, err := f.db.ExecContext(ctx, `UPDATE `+f.table+` SET head = 1 WHERE id = 'z-1'`); err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := f.db.QueryRowContext(ctx, `SELECT seq FROM `+f.table+` WHERE id = 'z-1'`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	// Another relay's claim: z's head locked by primary key in READ
	// COMMITTED (no gap locks, so Enqueue never waits for it).
	lock, err := f.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if err := lock.QueryRowContext(ctx, `SELECT seq FROM `+f.table+` WHERE seq = ? FOR UPDATE`, seq).Scan(&seq); err != nil {
		t.Fatal(err)
	}

	rec := &batchRecorder{}
	r, err := f.ob.NewRelay(rec, &outbox.RelayConfig{BatchSize: 100, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	// How long one claim over the backlog takes here, to spread the
	// commits over it.
	start := time.Now()
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	scan := time.Since(start)
	t.Logf("a claim over the backlog takes %v", scan)
	const attempts = 16
	reproduced := 0
	for i := range attempts {
		key := "k" + strconv.Itoa(i)
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := 1; j <= 2; j++ {
			if err := f.ob.Enqueue(ctx, tx, outbox.Message{ID: key + "-" + strconv.Itoa(j), Destination: "d", OrderingKey: key}); err != nil {
				t.Fatalf("attempt %d: %v", i, err)
			}
		}
		rec.reset()
		done := make(chan error, 1)
		go func() { _, err := r.RunOnce(ctx); done <- err }()
		time.Sleep(scan * time.Duration(i%8+1) / 12)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if k := rec.twoOfAKey(); k != "" {
			reproduced++
			t.Errorf("attempt %d: one batch held two messages of key %s", i, k)
		}
		// Publish the key's two messages before the next attempt.
		for {
			in, err := f.ob.Get(ctx, key+"-2")
			if err != nil {
				t.Fatal(err)
			}
			if in.State == outbox.Sent {
				break
			}
			if _, err := r.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d of %d attempts handed over two messages of a key in one batch", reproduced, attempts)
}

// batchRecorder confirms everything and remembers the batches since reset.
type batchRecorder struct {
	mu      sync.Mutex
	batches [][]outbox.Message
}

func (b *batchRecorder) Publish(ctx context.Context, batch []outbox.Message) []error {
	b.mu.Lock()
	b.batches = append(b.batches, append([]outbox.Message(nil), batch...))
	b.mu.Unlock()
	return make([]error, len(batch))
}

func (b *batchRecorder) reset() {
	b.mu.Lock()
	b.batches = nil
	b.mu.Unlock()
}

// twoOfAKey returns a key that one recorded batch holds twice, or "".
func (b *batchRecorder) twoOfAKey() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, batch := range b.batches {
		seen := map[string]bool{}
		for _, m := range batch {
			if seen[m.OrderingKey] && m.OrderingKey != "" {
				return m.OrderingKey
			}
			seen[m.OrderingKey] = true
		}
	}
	return ""
}
