package inboxredis_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/inboxredis"
	"github.com/idemkit/idem/internal/testenv"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // the outage test makes go-redis log every failed dial
	goleak.VerifyTestMain(m)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestNewValidates(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, c := range []*inboxredis.Config{{ClaimTTL: time.Microsecond}, {DoneTTL: -time.Second}, {Timeout: -1}, {Prefix: "a b"}} {
		if _, err := inboxredis.New(rdb, c); !errors.Is(err, inboxredis.ErrInvalidConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := inboxredis.New(nil, nil); !errors.Is(err, inboxredis.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
}

// TestScripts checks each Lua decision against a real Redis.
func TestScripts(t *testing.T) {
	rdb, prefix := testenv.RedisClient(t)
	fp, err := inboxredis.New(rdb, &inboxredis.Config{Prefix: prefix, ClaimTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	st, tok, err := fp.Claim(ctx, "k")
	if err != nil || st != inbox.FastClaimed || tok == "" {
		t.Fatalf("first claim: %v %q %v", st, tok, err)
	}
	if st, _, err := fp.Claim(ctx, "k"); err != nil || st != inbox.FastBusy {
		t.Fatalf("second claim: %v %v", st, err)
	}
	// A foreign release or a token-less completion leaves the live claim alone.
	if err := fp.Release(ctx, "k", "someone-else"); err != nil {
		t.Fatal(err)
	}
	if err := fp.Complete(ctx, "k", ""); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, prefix+"k").Val(); v != "processing:"+tok {
		t.Fatalf("claim overwritten: %q", v)
	}
	// The owner's release frees it.
	if err := fp.Release(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, prefix+"k").Val(); n != 0 {
		t.Fatal("release by the owner did not delete")
	}
	// Claim, complete: done, with the done TTL.
	_, tok, _ = fp.Claim(ctx, "k")
	if err := fp.Complete(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if st, _, err := fp.Claim(ctx, "k"); err != nil || st != inbox.FastDone {
		t.Fatalf("after complete: %v %v", st, err)
	}
	if ttl := rdb.PTTL(ctx, prefix+"k").Val(); ttl < time.Hour {
		t.Fatalf("done TTL %v, want about 24h", ttl)
	}
	// Release never deletes "done".
	if err := fp.Release(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := fp.Claim(ctx, "k"); st != inbox.FastDone {
		t.Fatal("release deleted a done entry")
	}
	// Token-less completion fills an empty key (lost or never claimed).
	if err := fp.Complete(ctx, "k2", ""); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := fp.Claim(ctx, "k2"); st != inbox.FastDone {
		t.Fatal("token-less complete did not fill an empty key")
	}
}

func TestClaimExpires(t *testing.T) {
	rdb, prefix := testenv.RedisClient(t)
	fp, err := inboxredis.New(rdb, &inboxredis.Config{Prefix: prefix, ClaimTTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if st, _, _ := fp.Claim(ctx, "k"); st != inbox.FastClaimed {
		t.Fatal(st)
	}
	for { // poll: a dead holder's claim goes away on its own
		st, _, err := fp.Claim(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if st == inbox.FastClaimed {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type fixture struct {
	db    *sql.DB
	ib    *inbox.Inbox
	table string
}

func newFixture(t *testing.T, fast inbox.FastPath) *fixture {
	t.Helper()
	db, _ := testenv.PostgresDB(t)
	db.SetMaxOpenConns(12)
	table := testenv.Name("inbox")
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: table, FastPath: fast})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+`_effects (message_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &fixture{db: db, ib: ib, table: table}
}

func (f *fixture) effect(id string) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+f.table+`_effects (message_id) VALUES ($1)`, id)
		return err
	}
}

func (f *fixture) effects(t *testing.T) (total, distinct int) {
	t.Helper()
	if err := f.db.QueryRowContext(ctxT(t), `SELECT COUNT(*), COUNT(DISTINCT message_id) FROM `+f.table+`_effects`).Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	return total, distinct
}

func TestConcurrentDuplicatesWithFastPath(t *testing.T) {
	rdb, prefix := testenv.RedisClient(t)
	fp, err := inboxredis.New(rdb, &inboxredis.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, fp)
	ctx := ctxT(t)
	var processed atomic.Int32
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			out, err := f.ib.Process(ctx, "c", "same", f.effect("same"))
			if err != nil {
				t.Error(err)
			}
			if out == inbox.Processed {
				processed.Add(1)
			}
		})
	}
	wg.Wait()
	if total, _ := f.effects(t); total != 1 || processed.Load() != 1 {
		t.Fatalf("%d effects, %d processed; want 1, 1", total, processed.Load())
	}
	// Later duplicates are absorbed by Redis without touching the database.
	before := f.ib.Stats().FastPathDuplicates
	for range 10 {
		if out, err := f.ib.Process(ctx, "c", "same", f.effect("same")); err != nil || out != inbox.Duplicate {
			t.Fatal(out, err)
		}
	}
	if got := f.ib.Stats().FastPathDuplicates - before; got != 10 {
		t.Fatalf("%d of 10 duplicates answered by Redis", got)
	}
}

// TestRedisLossMidRun: the fast path's Redis is flushed, then killed, then
// restarted empty while workers consume a stream with duplicates. The
// database stays the judge: no error reaches the consumer, no message is
// lost and none is applied twice.
func TestRedisLossMidRun(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	fp, err := inboxredis.New(rdb, &inboxredis.Config{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, fp)
	ctx := ctxT(t)
	const unique, total = 1400, 2000
	deliveries := make([]string, 0, total)
	for i := range unique {
		deliveries = append(deliveries, fmt.Sprint("m", i))
	}
	for len(deliveries) < total {
		deliveries = append(deliveries, fmt.Sprint("m", rand.IntN(unique)))
	}
	rand.Shuffle(total, func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	queue := make(chan string, total)
	for _, d := range deliveries {
		queue <- d
	}
	close(queue)
	var done atomic.Int64
	var phase sync.Mutex
	events := map[int64]func(){
		total / 5:     func() { rdb.FlushAll(context.Background()) },
		total * 2 / 5: srv.Kill,
		total * 3 / 5: srv.Start,
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for id := range queue {
				out, err := f.ib.Process(ctx, "c", id, f.effect(id))
				if err != nil || (out != inbox.Processed && out != inbox.Duplicate) {
					t.Errorf("%s: %v, %v", id, out, err)
				}
				if ev, ok := events[done.Add(1)]; ok {
					phase.Lock()
					ev()
					phase.Unlock()
				}
			}
		})
	}
	wg.Wait()
	totalEffects, distinct := f.effects(t)
	if totalEffects != unique || distinct != unique {
		t.Fatalf("effects %d (distinct %d), want %d", totalEffects, distinct, unique)
	}
	s := f.ib.Stats()
	if s.FastPathErrors == 0 {
		t.Fatal("Redis was killed but no fast-path error was seen: the test did not exercise the outage")
	}
	t.Logf("stats %+v", s)
}
