package tiered_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/tiered"
)

// The conformance suite sees a healthy fast store: give it time enough
// that a loaded CI machine does not turn a slow reply into a fast failure.
var healthy = &tiered.Config{FastTimeout: 2 * time.Second}

func TestConformanceRedisPostgres(t *testing.T) {
	idemtest.RunStore(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			d, _, _ := durableOnPostgres(t)
			return newTiered(t, fastOnShared(t), d, healthy)
		},
		Unreachable: func(t *testing.T) idem.Store {
			return newTiered(t, fastUnreachable(t), durableUnreachable(t), nil)
		},
		Concurrency: 100,
	})
}

func TestConformanceRedisMemstore(t *testing.T) {
	idemtest.RunStore(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			return newTiered(t, fastOnShared(t), durableInMemory(t), healthy)
		},
	})
}

// TestConformanceFastDown: with the fast store unreachable from the start,
// the tiered store is exactly the durable one.
func TestConformanceFastDown(t *testing.T) {
	idemtest.RunStore(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			return newTiered(t, fastUnreachable(t), durableInMemory(t), &tiered.Config{FastBackoff: -1})
		},
	})
}

func TestNewValidates(t *testing.T) {
	m := durableInMemory(t)
	if _, err := tiered.New(nil, m, nil); err == nil {
		t.Error("New(nil fast) succeeded")
	}
	if _, err := tiered.New(m, nil, nil); err == nil {
		t.Error("New(nil durable) succeeded")
	}
	if _, err := tiered.New(m, m, &tiered.Config{FastTimeout: -1}); err == nil {
		t.Error("New with negative FastTimeout succeeded")
	}
	if _, err := tiered.New(m, m, nil); err != nil {
		t.Errorf("New(defaults) = %v", err)
	}
}

// TestDuplicatesMakeNoDurableQueries: floods of replays and of in-flight
// duplicates are answered by Redis; PostgreSQL receives not one message.
func TestDuplicatesMakeNoDurableQueries(t *testing.T) {
	d, _, sqlMsgs := durableOnPostgres(t)
	spy := &spyStore{Store: d}
	s := newTiered(t, fastOnShared(t), spy, healthy)
	ctx := ctxT(t)

	done := idem.BeginRequest{Key: newKey(), Fingerprint: idem.FingerprintOf([]byte("pay 10"))}
	c, err := s.Begin(ctx, done)
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", c, err)
	}
	if err := s.Complete(ctx, c.Owner, []byte("receipt-1")); err != nil {
		t.Fatal(err)
	}
	running := idem.BeginRequest{Key: newKey(), Fingerprint: idem.FingerprintOf([]byte("pay 20")), Lease: time.Minute}
	if c, err := s.Begin(ctx, running); err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", c, err)
	}

	beforeCalls, beforeMsgs := spy.calls(), sqlMsgs.writes.Load()
	const workers, each = 8, 150
	var wg sync.WaitGroup
	var bad atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r, err := s.Begin(ctx, done)
				if err != nil || r.Outcome != idem.Replay || string(r.Result) != "receipt-1" {
					bad.Add(1)
				}
				f, err := s.Begin(ctx, running)
				if err != nil || f.Outcome != idem.InFlight || f.RetryAfter <= 0 {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d duplicates were not answered Replay / InFlight", bad.Load())
	}
	if n := spy.calls() - beforeCalls; n != 0 {
		t.Errorf("%d calls reached the durable store during %d duplicates, want 0", n, 2*workers*each)
	}
	if n := sqlMsgs.writes.Load() - beforeMsgs; n != 0 {
		t.Errorf("%d messages were sent to PostgreSQL during %d duplicates, want 0", n, 2*workers*each)
	}
	if st := s.Stats(); st.FastAnswers != 2*workers*each {
		t.Errorf("Stats = %+v, want %d fast answers", st, 2*workers*each)
	}
}

// TestNeverCachesInProgressAsFinal: while the first call runs, duplicates
// get InFlight, never Replay; when it fails (releases), a duplicate
// executes.
func TestNeverCachesInProgressAsFinal(t *testing.T) {
	fast := fastOnShared(t)
	s := newTiered(t, fast, durableInMemory(t), healthy)
	ctx := ctxT(t)
	key := newKey()

	var runs atomic.Int32
	started, fail := make(chan struct{}), make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		_, err := idem.Do(ctx, s, key, nil, func(context.Context) (string, error) {
			runs.Add(1)
			close(started)
			<-fail
			return "", errors.New("card declined by a flaky upstream")
		})
		firstErr <- err
	}()
	<-started
	for i := 0; i < 50; i++ {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: key})
		if err != nil || c.Outcome != idem.InFlight {
			t.Fatalf("duplicate during execution = %v, %v; want InFlight", c.Outcome, err)
		}
	}
	if rec, err := fast.Get(ctx, key); err != nil || rec.State != idem.StateInProgress || rec.Result != nil {
		t.Fatalf("fast record during execution = %+v, %v; want in_progress without result", rec, err)
	}
	close(fail)
	if err := <-firstErr; err == nil {
		t.Fatal("first Do succeeded")
	}
	v, err := idem.Do(ctx, s, key, nil, func(context.Context) (string, error) {
		runs.Add(1)
		return "ok", nil
	})
	if err != nil || v != "ok" || runs.Load() != 2 {
		t.Fatalf("retry after the failure = %q, %v, %d runs; want it to execute", v, err, runs.Load())
	}
	if c, err := s.Begin(ctx, idem.BeginRequest{Key: key}); err != nil || c.Outcome != idem.Replay || string(c.Result) != `"ok"` {
		t.Fatalf("Begin after success = %+v, %v; want Replay", c, err)
	}
}

// TestFailedDurableCompleteIsNeverReplayed: the fast store caches a result
// only after the durable store holds it.
func TestFailedDurableCompleteIsNeverReplayed(t *testing.T) {
	fast := fastOnShared(t)
	durable := &spyStore{Store: durableInMemory(t)}
	s := newTiered(t, fast, durable, healthy)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(), Lease: time.Minute}
	c, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	durable.failComplete.Store(true)
	if err := s.Complete(ctx, c.Owner, []byte("never seen")); !idem.IsUnavailable(err) {
		t.Fatalf("Complete with the durable store failing = %v, want unavailable", err)
	}
	if d, err := s.Begin(ctx, req); err != nil || d.Outcome != idem.InFlight {
		t.Fatalf("duplicate after the failed Complete = %+v, %v; want InFlight", d, err)
	}
	if rec, _ := fast.Get(ctx, req.Key); rec.State != idem.StateInProgress {
		t.Fatalf("fast record = %v, want in_progress", rec.State)
	}
	// The owner retries Complete; now both stores hold the result.
	durable.failComplete.Store(false)
	if err := s.Complete(ctx, c.Owner, []byte("seen")); err != nil {
		t.Fatal(err)
	}
	before := durable.calls()
	if d, err := s.Begin(ctx, req); err != nil || d.Outcome != idem.Replay || string(d.Result) != "seen" {
		t.Fatalf("duplicate after Complete = %+v, %v", d, err)
	}
	if durable.calls() != before {
		t.Errorf("replay asked the durable store")
	}
}

// TestWarmsFromDurable: a completed durable record with no fast record (a
// flushed Redis) is replayed by the durable store once, then from Redis.
func TestWarmsFromDurable(t *testing.T) {
	fast, rc, _ := fastOnPrivate(t)
	durable := &spyStore{Store: durableInMemory(t)}
	s := newTiered(t, fast, durable, healthy)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey()}
	c, _ := s.Begin(ctx, req)
	if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := durable.begins.Load()
	for i := 0; i < 5; i++ {
		if d, err := s.Begin(ctx, req); err != nil || d.Outcome != idem.Replay || string(d.Result) != "r" {
			t.Fatalf("Begin after flush = %+v, %v", d, err)
		}
	}
	if n := durable.begins.Load() - before; n != 1 {
		t.Errorf("durable Begins after the flush = %d, want 1 (then the fast store is warm)", n)
	}
}

// TestFastMismatchIsConfirmed: a fast claim whose release never reached
// Redis does not turn a legitimate new request into a 422.
func TestFastMismatchIsConfirmed(t *testing.T) {
	fast := &spyStore{Store: fastOnShared(t)}
	s := newTiered(t, fast, durableInMemory(t), healthy)
	ctx := ctxT(t)
	key := newKey()
	a := idem.BeginRequest{Key: key, Fingerprint: idem.FingerprintOf([]byte("A")), Lease: time.Minute}
	c, err := s.Begin(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	fast.failRelease.Store(true)
	if err := s.Release(ctx, c.Owner); err != nil {
		t.Fatalf("Release with the fast store failing = %v, want nil", err)
	}
	fast.failRelease.Store(false)
	// The fast store still holds A in progress. The key was queued for
	// repair: the next Begin clears the stale claim first, so a duplicate
	// of A acquires at once instead of waiting for the fast lease.
	if d, err := s.Begin(ctx, a); err != nil || d.Outcome != idem.Acquired {
		t.Fatalf("Begin(A) after the failed fast release = %+v, %v; want Acquired (repaired)", d, err)
	} else if err := s.Release(ctx, d.Owner); err != nil {
		t.Fatal(err)
	}
	// A stale claim this process knows nothing of (another process's
	// release that never reached Redis): a duplicate of A is told to
	// wait (the documented cost), never replayed.
	if _, err := fast.Store.Begin(ctx, a); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Begin(ctx, a); err != nil || d.Outcome != idem.InFlight {
		t.Fatalf("Begin(A) = %+v, %v; want InFlight", d, err)
	}
	// B is new for the durable store, which is the judge.
	b := a
	b.Fingerprint = idem.FingerprintOf([]byte("B"))
	d, err := s.Begin(ctx, b)
	if err != nil || d.Outcome != idem.Acquired {
		t.Fatalf("Begin(B) = %+v, %v; want Acquired", d, err)
	}
	if err := s.Complete(ctx, d.Owner, []byte("b")); err != nil {
		t.Fatal(err)
	}
	// The durable grant overwrote the stale A claim in Redis: B's replay
	// comes from Redis, and A is a mismatch, never given B's result.
	if rec, err := fast.Get(ctx, key); err != nil || rec.State != idem.StateCompleted || rec.Fingerprint != b.Fingerprint {
		t.Errorf("fast record after B completed = %+v, %v; want B's", rec, err)
	}
	if r, err := s.Begin(ctx, b); err != nil || r.Outcome != idem.Replay || string(r.Result) != "b" {
		t.Errorf("Begin(B) after B completed = %+v, %v; want Replay", r, err)
	}
	if m, err := s.Begin(ctx, a); err != nil || m.Outcome != idem.Mismatch {
		t.Errorf("Begin(A) after B completed = %+v, %v; want Mismatch", m, err)
	}
	if st := s.Stats(); st.FastErrors != 1 {
		t.Errorf("Stats = %+v; want only the injected release failure", st)
	}
}

// TestLostFastAnswer: the fast Begin ran but its answer was lost (a
// timeout). Knowing the token it chose, the tiered store still completes
// that fast claim, so duplicates replay from Redis instead of waiting for
// the fast lease.
func TestLostFastAnswer(t *testing.T) {
	fast := &spyStore{Store: fastOnShared(t)}
	durable := &spyStore{Store: durableInMemory(t)}
	s := newTiered(t, fast, durable, &tiered.Config{FastTimeout: 2 * time.Second, FastBackoff: -1})
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(), Lease: time.Minute}
	fast.loseBeginAnswer.Store(true)
	c, err := s.Begin(ctx, req)
	fast.loseBeginAnswer.Store(false)
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", c, err)
	}
	if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	before := durable.calls()
	if d, err := s.Begin(ctx, req); err != nil || d.Outcome != idem.Replay || string(d.Result) != "r" {
		t.Fatalf("duplicate = %+v, %v; want Replay", d, err)
	}
	if durable.calls() != before {
		t.Errorf("the replay asked the durable store")
	}
	if s.Stats().FastErrors != 1 {
		t.Errorf("Stats = %+v, want 1 fast error", s.Stats())
	}
}

// TestHungFastStore: a Redis that accepts connections and never answers
// costs FastTimeout once, then Begin skips it; every request is still
// served, exactly once.
func TestHungFastStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
	})
	var fast *redisstore.Store
	if suiteClient == testenv.RueidisKind {
		// rueidis dials at construction, and its handshake gets no answer
		// here: ForceSingleClient keeps the client all the same, and every
		// call dials again, bounded by its context.
		o := rueidis.ClientOption{InitAddress: []string{ln.Addr().String()}, ForceSingleClient: true, ConnWriteTimeout: 100 * time.Millisecond, DisableCache: true}
		rc, err := rueidis.NewClient(o)
		if rc == nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		fast, _ = redisstore.NewRueidis(rc, nil)
	} else {
		// ContextTimeoutEnabled: go-redis honours context deadlines only with it.
		rc := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rc.Close() })
		fast, _ = redisstore.New(rc, nil)
	}
	s := newTiered(t, fast, durableInMemory(t), &tiered.Config{FastTimeout: 50 * time.Millisecond, FastBackoff: time.Hour})
	ctx := ctxT(t)
	var runs atomic.Int32
	for i := 0; i < 20; i++ {
		key := idem.MustKey("t", fmt.Sprintf("hung-%d", i%5))
		v, err := idem.Do(ctx, s, key, nil, func(context.Context) (int, error) { return int(runs.Add(1)), nil })
		if err != nil || v == 0 {
			t.Fatalf("Do = %v, %v", v, err)
		}
	}
	if runs.Load() != 5 {
		t.Errorf("%d executions for 5 keys", runs.Load())
	}
	if st := s.Stats(); st.DurableBegins != 20 || st.FastErrors == 0 || st.FastErrors > 4 {
		t.Errorf("Stats = %+v; want every Begin durable and the fast store skipped after its first failure", st)
	}
}

// TestFastLoss: Redis is killed, flushed and restarted under 8 goroutines
// that retry many keys: no caller ever sees an error because of Redis, each
// key executes exactly once, and every call returns the first result.
func TestFastLoss(t *testing.T) {
	fast, rc, srv := fastOnPrivate(t)
	durable, _, _ := durableOnPostgres(t)
	s := newTiered(t, fast, durable, &tiered.Config{FastTimeout: 250 * time.Millisecond, FastBackoff: 20 * time.Millisecond})
	ctx := ctxT(t)

	const nkeys, workers, rounds = 60, 8, 4
	keys := make([]idem.Key, nkeys)
	for i := range keys {
		keys[i] = newKey()
	}
	var execs [nkeys]atomic.Int32
	var results [nkeys]sync.Map // result → true
	var progress atomic.Int64
	var errs sync.Map
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				for j := 0; j < nkeys; j++ {
					i := (j + w*7) % nkeys
					opts := &idem.Options{Wait: true, Lease: 2 * time.Second, PollInterval: 5 * time.Millisecond}
					v, err := idem.Do(ctx, s, keys[i], opts, func(ctx context.Context) (string, error) {
						execs[i].Add(1)
						return fmt.Sprintf("r%d-fence%d", i, idem.FenceFromContext(ctx)), nil
					})
					if err != nil {
						errs.Store(err.Error(), true)
						continue
					}
					results[i].Store(v, true)
					progress.Add(1)
				}
			}
		}()
	}
	total := int64(workers * rounds * nkeys)
	waitFor := func(n int64) {
		for progress.Load() < n && progress.Load() < total {
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitFor(total / 8)
	srv.Kill()
	waitFor(total * 2 / 8)
	srv.Start()
	waitFor(total * 4 / 8)
	_ = rc.FlushAll(ctx).Err()
	waitFor(total * 6 / 8)
	srv.Restart()
	wg.Wait()

	errs.Range(func(k, _ any) bool { t.Errorf("caller saw an error: %v", k); return true })
	for i := range keys {
		if n := execs[i].Load(); n != 1 {
			t.Errorf("key %d executed %d times", i, n)
		}
		var distinct []string
		results[i].Range(func(k, _ any) bool { distinct = append(distinct, k.(string)); return true })
		if len(distinct) != 1 {
			t.Errorf("key %d returned %d different results: %v", i, len(distinct), distinct)
		}
	}
	if s.Stats().FastErrors == 0 {
		t.Errorf("the fast store never failed; the test did not test the outage")
	}
	// After the chaos, retries replay (from Redis, once it is warm again).
	for i, k := range keys {
		if _, err := idem.Do(ctx, s, k, nil, func(context.Context) (string, error) {
			execs[i].Add(1)
			return "again", nil
		}); err != nil || execs[i].Load() != 1 {
			t.Errorf("key %d after the outage: %v, %d executions", i, err, execs[i].Load())
		}
	}
}

const childEnv = "IDEM_TIERED_CRASH_CHILD"

// crashChild claims a key through a tiered store and hangs until killed.
func crashChild() {
	args := strings.Split(os.Getenv(childEnv), "|") // redis URL, prefix, postgres DSN, key id
	opt, _ := redis.ParseURL(args[0])
	var fast *redisstore.Store
	if os.Getenv(childClientEnv) == testenv.RueidisKind {
		rc, err := rueidis.NewClient(redistest.RueidisOption(opt))
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(2)
		}
		fast, _ = redisstore.NewRueidis(rc, &redisstore.Config{Prefix: args[1]})
	} else {
		opt.ContextTimeoutEnabled = true
		fast, _ = redisstore.New(redis.NewClient(opt), &redisstore.Config{Prefix: args[1]})
	}
	db, err := sqlOpen(args[2])
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	durable, _ := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres})
	s, _ := tiered.New(fast, durable, nil)
	c, err := s.Begin(context.Background(), idem.BeginRequest{Key: idem.MustKey("crash", args[3]), Lease: 300 * time.Millisecond, Retention: time.Hour})
	if err != nil || c.Outcome != idem.Acquired {
		fmt.Println("ERR", c.Outcome, err)
		os.Exit(2)
	}
	fmt.Printf("ACQUIRED %d %s\n", c.Owner.Fence, c.Owner.Token)
	select {}
}

// TestCrashedHolder kills a process that holds a tiered claim: both its
// fast and its durable lease run out, and a retry in another process takes
// over (judged by PostgreSQL) with a larger fence; the dead holder's owner
// is refused.
func TestCrashedHolder(t *testing.T) {
	durable, dsn, _ := durableOnPostgres(t)
	_, prefix := redistest.RedisClient(t)
	fast := fastOn(t, sharedClient(t), &redisstore.Config{Prefix: prefix})
	s := newTiered(t, fast, durable, healthy)
	ctx := ctxT(t)
	id := testenv.Name("crash")

	line := testenv.KillAtLine(t, "ACQUIRED ", time.Minute,
		[]string{childEnv + "=" + testenv.Redis.DSN() + "|" + prefix + "|" + dsn + "|" + id, childClientEnv + "=" + suiteClient}, "-test.run=^$")
	var dead idem.Owner
	var tok string
	if _, err := fmt.Sscanf(line, "%d %s", &dead.Fence, &tok); err != nil {
		t.Fatalf("child said %q", line)
	}
	dead.Key = idem.MustKey("crash", id)
	if b, err := hex.DecodeString(tok); err != nil || copy(dead.Token[:], b) != 16 {
		t.Fatalf("child token %q", tok)
	}

	req := idem.BeginRequest{Key: dead.Key, Lease: time.Minute, Retention: time.Hour}
	deadline := time.Now().Add(15 * time.Second)
	var (
		c   idem.Claim
		err error
	)
	for {
		c, err = s.Begin(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome == idem.Acquired {
			break
		}
		if c.Outcome != idem.InFlight || time.Now().After(deadline) {
			t.Fatalf("Begin after the holder died = %v", c.Outcome)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !c.Takeover || c.Owner.Fence <= dead.Fence {
		t.Errorf("claim after the crash = %+v; want a takeover with fence > %d", c, dead.Fence)
	}
	if err := s.Complete(ctx, dead, []byte("zombie")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("dead holder's Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, c.Owner, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Begin(ctx, req); err != nil || string(r.Result) != "ok" {
		t.Errorf("replay = %+v, %v", r, err)
	}
}
