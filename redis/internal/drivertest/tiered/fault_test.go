package tiered_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/tiered"
)

// fastThroughProxy returns a redisstore on a private redis-server reached
// through a fault proxy, on the suite's client: go-redis with its own
// retries on (the default), or rueidis with a ConnWriteTimeout of
// readTimeout (redisstore resends on rueidis itself).
func fastThroughProxy(t *testing.T, readTimeout time.Duration) (*redisstore.Store, *testenv.FaultProxy) {
	t.Helper()
	srv := testenv.StartRedis(t)
	p := testenv.NewFaultProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{
		Addr:                  p.Addr(),
		MaxRetries:            3,
		ReadTimeout:           readTimeout,
		DialTimeout:           readTimeout,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return fastOn(t, c, nil), p
}

// TestLostFastReplyResent: the reply to the fast Begin is lost on the wire
// after the script ran, and go-redis resends it. The resend finds the
// caller's own fast claim and answers Acquired (not InFlight, which the
// tiered store would have returned to the caller about its own claim for a
// whole lease); the durable store grants the claim, and after Complete the
// retries replay from Redis.
func TestLostFastReplyResent(t *testing.T) {
	t.Parallel()
	fast, p := fastThroughProxy(t, 300*time.Millisecond)
	durable := &spyStore{Store: durableInMemory(t)}
	s := newTiered(t, fast, durable, &tiered.Config{FastTimeout: 10 * time.Second, FastBackoff: -1})
	ctx := ctxT(t)
	warm, err := s.Begin(ctx, idem.BeginRequest{Key: newKey()}) // a pooled connection, the scripts cached
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, warm.Owner, nil); err != nil {
		t.Fatal(err)
	}

	req := idem.BeginRequest{Key: newKey(), Lease: time.Minute}
	testenv.OpenRedisConns(t, fast)
	p.DropNextReply()
	c, err := s.Begin(ctx, req)
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin with the fast reply lost = %+v, %v; want Acquired", c, err)
	}
	if rec, err := fast.Get(ctx, req.Key); err != nil || rec.State != idem.StateInProgress {
		t.Fatalf("fast record = %+v, %v; want the claim in progress", rec, err)
	}
	if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	before := durable.calls()
	if d, err := s.Begin(ctx, req); err != nil || d.Outcome != idem.Replay || string(d.Result) != "r" {
		t.Fatalf("retry = %+v, %v; want Replay", d, err)
	}
	if durable.calls() != before {
		t.Errorf("the retry asked the durable store; Redis should have answered")
	}
	if st := s.Stats(); st.FastErrors != 0 {
		t.Errorf("Stats = %+v; the resend should have hidden the lost reply", st)
	}
}

// TestFastFaultsFallThrough: while 8 goroutines retry many keys, the link
// to Redis black-holes, drops every reply, refuses connections and resets
// them in mid-reply. No caller ever sees an error, each key executes
// exactly once, and every call returns that execution's result: Redis
// faults fall through to the durable store, never reject.
func TestFastFaultsFallThrough(t *testing.T) {
	t.Parallel()
	// PostgreSQL first: without it the test skips before it dials Redis
	// through the proxy with a 100 ms dial timeout, which a loaded machine
	// can miss (the rueidis client dials when it is made).
	durable, _, _ := durableOnPostgres(t)
	fast, p := fastThroughProxy(t, 100*time.Millisecond)
	s := newTiered(t, fast, durable, &tiered.Config{FastTimeout: 100 * time.Millisecond, FastBackoff: 200 * time.Millisecond})
	ctx := ctxT(t)

	const nkeys, workers, rounds = 40, 8, 5
	keys := make([]idem.Key, nkeys)
	for i := range keys {
		keys[i] = newKey()
	}
	var execs [nkeys]atomic.Int32
	var results [nkeys]sync.Map
	var progress atomic.Int64
	var errs sync.Map
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				for j := 0; j < nkeys; j++ {
					i := (j + w*5) % nkeys
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
	step := total / 10
	waitFor(step)
	p.Set(testenv.BlackHole)
	waitFor(2 * step)
	p.Set(testenv.Pass)
	waitFor(3 * step)
	p.Set(testenv.DropReplies)
	waitFor(4 * step)
	p.Set(testenv.Pass)
	waitFor(5 * step)
	p.Set(testenv.Refuse)
	waitFor(6 * step)
	p.Set(testenv.Pass)
	for n := int64(7); n <= 9; n++ {
		p.CutNextReply(5)
		p.DropNextReply()
		waitFor(n * step)
	}
	p.ResetAll()
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
		t.Errorf("the fast store never failed; the test did not test the faults")
	}
	// Afterwards every key replays its one result.
	for i, k := range keys {
		var want string
		results[i].Range(func(k, _ any) bool { want = k.(string); return false })
		v, err := idem.Do(ctx, s, k, nil, func(context.Context) (string, error) {
			execs[i].Add(1)
			return "again", nil
		})
		if err != nil || v != want || execs[i].Load() != 1 {
			t.Errorf("key %d after the faults = %q, %v (%d executions); want %q", i, v, err, execs[i].Load(), want)
		}
	}
}
