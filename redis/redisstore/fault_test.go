package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
)

// proxied starts a private redis-server with a fault proxy in front and
// returns a store whose client, of the suite's kind, goes through the proxy
// with opt's settings, ContextTimeoutEnabled set (storeOn), and a direct
// client for checks.
func proxied(t *testing.T, opt redis.Options) (*redisstore.Store, *testenv.FaultProxy, *redis.Client) {
	t.Helper()
	srv := testenv.StartRedis(t)
	p := testenv.NewFaultProxy(t, srv.Addr())
	opt.Addr = p.Addr()
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(&opt)
	t.Cleanup(func() { c.Close() })
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { direct.Close() })
	return storeOn(t, c, nil), p, direct
}

// evalCalls counts the scripts the server ran (EVALSHA and EVAL).
func evalCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				v, _, _ := strings.Cut(rest, ",")
				k, _ := strconv.Atoi(v)
				n += k
			}
		}
	}
	return n
}

// TestLostReplyResent: the reply to a Begin is lost on the wire after the
// script ran; go-redis (retries enabled, the default) times the read out
// and sends the Begin again on a new connection, and so does the store on
// rueidis (NewRueidis resends; the read times out at the
// ConnWriteTimeout storeOn derives from ReadTimeout). The second run finds the
// caller's own claim and answers Acquired, with the same fence: the caller
// owns the key at once, instead of being told InFlight about its own claim
// for a whole lease.
func TestLostReplyResent(t *testing.T) {
	t.Parallel()
	s, p, direct := proxied(t, redis.Options{MaxRetries: 3, ReadTimeout: 300 * time.Millisecond})
	ctx := ctxT(t)
	// Warm up: a connection in the pool and the script in the server's cache.
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)}); err != nil {
		t.Fatal(err)
	}
	req := idem.BeginRequest{Key: key(t), Lease: time.Minute}
	testenv.OpenRedisConns(t, s)
	before := evalCalls(t, direct)
	p.DropNextReply()
	c, err := s.Begin(ctx, req)
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin with its reply lost = %+v, %v; want Acquired", c, err)
	}
	if n := evalCalls(t, direct) - before; n != 2 {
		t.Fatalf("the server ran %d Begin scripts, want 2 (the first and the resend)", n)
	}
	rec, err := s.Get(ctx, req.Key)
	if err != nil || rec.Fence != c.Owner.Fence || rec.State != idem.StateInProgress {
		t.Fatalf("record = %+v, %v; want the claim with fence %d", rec, err, c.Owner.Fence)
	}
	if d, err := s.Begin(ctx, req); err != nil || d.Outcome != idem.InFlight {
		t.Errorf("a duplicate = %+v, %v; want InFlight", d, err)
	}
	if err := s.Complete(ctx, c.Owner, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Begin(ctx, req); err != nil || string(r.Result) != "ok" {
		t.Errorf("replay = %+v, %v", r, err)
	}
}

// TestLostTakeoverReplyResent: a takeover of a marked claim whose reply
// is lost and resent still tells the caller that it is a takeover and that
// the previous holder had started: the resend answers as the first run did.
func TestLostTakeoverReplyResent(t *testing.T) {
	t.Parallel()
	s, p, _ := proxied(t, redis.Options{MaxRetries: 3, ReadTimeout: 300 * time.Millisecond})
	ctx := ctxT(t)
	// The holder's MarkStarted must come within its lease (a loaded machine
	// can spend 50ms between two calls through the proxy); then the test
	// waits for the lease to run out.
	req := idem.BeginRequest{Key: key(t), Lease: time.Second, Retention: time.Minute}
	dead, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkStarted(ctx, dead.Owner); err != nil {
		t.Fatal(err)
	}
	for { // until the holder's lease has run out
		rec, err := s.Get(ctx, req.Key)
		if err != nil {
			t.Fatal(err)
		}
		if !time.Now().Before(rec.LeaseUntil.Add(10 * time.Millisecond)) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	testenv.OpenRedisConns(t, s)
	p.DropNextReply()
	req.Lease = time.Minute
	c, err := s.Begin(ctx, req)
	if err != nil || c.Outcome != idem.Acquired || !c.Takeover || !c.Started {
		t.Fatalf("takeover with its reply lost = %+v, %v; want Acquired, Takeover, Started", c, err)
	}
	if err := s.MarkStarted(ctx, dead.Owner); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("dead holder's MarkStarted = %v, want ErrLeaseLost", err)
	}
	rec, err := s.Get(ctx, req.Key)
	if err != nil || !rec.Started || rec.Fence != c.Owner.Fence {
		t.Errorf("record = %+v, %v; want the new claim, still marked", rec, err)
	}
}

// TestLostCompleteReplyResent: a Complete whose reply was lost is resent
// and succeeds (the script keeps the first result for its owner).
func TestLostCompleteReplyResent(t *testing.T) {
	t.Parallel()
	s, p, _ := proxied(t, redis.Options{MaxRetries: 3, ReadTimeout: 300 * time.Millisecond})
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: key(t), Lease: time.Minute}
	c, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	testenv.OpenRedisConns(t, s)
	p.DropNextReply()
	if err := s.Complete(ctx, c.Owner, []byte("ok")); err != nil {
		t.Fatalf("Complete with its reply lost = %v", err)
	}
	if r, err := s.Begin(ctx, req); err != nil || r.Outcome != idem.Replay || string(r.Result) != "ok" {
		t.Errorf("replay = %+v, %v", r, err)
	}
}

// TestBlackHoledRedis: Redis stops answering (connections stay open,
// nothing arrives). Every call returns: with the caller's deadline, as the
// caller's context error; with the caller's context alive, at the client's
// ReadTimeout, as unavailable, never as a context error. No call waits
// longer than its budget, however long ReadTimeout is.
func TestBlackHoledRedis(t *testing.T) {
	t.Parallel()
	s, p, _ := proxied(t, redis.Options{MaxRetries: -1, ReadTimeout: time.Hour, DialTimeout: 200 * time.Millisecond})
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: key(t), Lease: time.Minute}
	c, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	p.Set(testenv.BlackHole)
	ops := map[string]func(context.Context) error{
		"Begin":    func(ctx context.Context) error { _, err := s.Begin(ctx, req); return err },
		"Complete": func(ctx context.Context) error { return s.Complete(ctx, c.Owner, []byte("r")) },
		"Release":  func(ctx context.Context) error { return s.Release(ctx, c.Owner) },
		"Extend":   func(ctx context.Context) error { return s.Extend(ctx, c.Owner, time.Minute) },
		"Mark":     func(ctx context.Context) error { return s.MarkStarted(ctx, c.Owner) },
		"Get":      func(ctx context.Context) error { _, err := s.Get(ctx, req.Key); return err },
		"Check":    func(ctx context.Context) error { return s.Check(ctx) },
	}
	for name, op := range ops {
		// The caller's deadline ends the call: ReadTimeout is an hour.
		err := returns(t, name, func() error {
			cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			return op(cctx)
		})
		if !errors.Is(err, context.DeadlineExceeded) || idem.IsUnavailable(err) {
			t.Errorf("%s with the caller's deadline passed = %v; want context.DeadlineExceeded, not unavailable", name, err)
		}
	}

	// The caller's context is alive; the client's own bound (here a short
	// ReadTimeout) ends the call: unavailable, not a context error.
	s2, p2, _ := proxied(t, redis.Options{MaxRetries: -1, ReadTimeout: 150 * time.Millisecond, DialTimeout: 150 * time.Millisecond})
	// Before the fault, a loaded machine can make a healthy call outlast the
	// 150ms bound too: that is not the case under test, so try again.
	var c2 idem.Claim
	for {
		if c2, err = s2.Begin(ctx, req); err == nil {
			break
		}
		if !idem.IsUnavailable(err) || ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	p2.Set(testenv.BlackHole)
	for name, op := range map[string]func(context.Context) error{
		"Begin":    func(ctx context.Context) error { _, err := s2.Begin(ctx, req); return err },
		"Complete": func(ctx context.Context) error { return s2.Complete(ctx, c2.Owner, []byte("r")) },
		"Get":      func(ctx context.Context) error { _, err := s2.Get(ctx, req.Key); return err },
	} {
		err := returns(t, name, func() error { return op(ctx) })
		if !idem.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Errorf("%s with the caller's context alive = %v; want unavailable, not a context error", name, err)
		}
	}
	// Back to normal: the claim is still there, the owner completes.
	p.Set(testenv.Pass)
	if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
		t.Errorf("Complete after the black hole = %v", err)
	}
}

// returns runs fn and fails the test if it does not return within a
// minute: the liveness bound of a call whose every budget is far shorter.
func returns(t *testing.T, name string, fn func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s hung on a black-holed Redis", name)
		return nil
	}
}

// TestRefusedAndResetRedis: a server that refuses connections, and one
// that resets them in mid-reply, make the store unavailable; it recovers
// when the server is back.
func TestRefusedAndResetRedis(t *testing.T) {
	t.Parallel()
	s, p, _ := proxied(t, redis.Options{MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: key(t), Lease: time.Minute}
	c, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	p.Set(testenv.Refuse)
	if _, err := s.Begin(ctx, req); !idem.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Begin with connections refused = %v, want unavailable", err)
	}
	p.Set(testenv.Pass)
	// A fresh connection, its handshake done, and the Complete script in
	// the server's cache, so that the cut reply is the Complete's own.
	warm, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, warm.Owner, nil); err != nil {
		t.Fatal(err)
	}
	testenv.OpenRedisConns(t, s)
	p.CutNextReply(3)
	// go-redis here has its retries off: the Complete fails. The store on
	// rueidis resends it (NewRueidis), on a new connection.
	err = s.Complete(ctx, c.Owner, []byte("r"))
	if suiteClient == testenv.RueidisKind && err != nil {
		t.Errorf("Complete reset in mid-reply, resent = %v, want nil", err)
	}
	if suiteClient == testenv.GoRedisKind && !idem.IsUnavailable(err) {
		t.Errorf("Complete reset in mid-reply = %v, want unavailable", err)
	}
	// The Complete ran before its reply was cut: a retry by the owner
	// succeeds and keeps the result.
	if err := s.Complete(ctx, c.Owner, []byte("other")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Begin(ctx, req); err != nil || string(r.Result) != "r" {
		t.Errorf("replay = %+v, %v; want r", r, err)
	}
}

// TestSnapshotRestore: Redis restarts from an RDB snapshot older than the
// last writes. Records written after the snapshot are gone, records in it
// come back as they were; fences never go back, because they grow with the
// server clock.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	s, c, srv := privateStore(t, nil)
	ctx := ctxT(t)
	// second's Complete must come within its lease on a loaded machine (2s,
	// not 200ms); the takeover below waits for first's restored lease.
	req := idem.BeginRequest{Key: key(t), Lease: 2 * time.Second, Retention: time.Hour}
	first, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Save(ctx).Err(); err != nil { // the snapshot: first's claim in progress
		t.Fatal(err)
	}
	if err := s.Release(ctx, first.Owner); err != nil {
		t.Fatal(err)
	}
	second, err := s.Begin(ctx, req)
	if err != nil || second.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", second, err)
	}
	if err := s.Complete(ctx, second.Owner, []byte("second")); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Start() // loads the snapshot from its directory
	rec, err := s.Get(ctx, req.Key)
	if err != nil || rec.State != idem.StateInProgress || rec.Fence != first.Owner.Fence {
		t.Fatalf("record after the restore = %+v, %v; want first's claim back", rec, err)
	}
	if err := s.Complete(ctx, second.Owner, []byte("again")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("second's Complete after the restore = %v, want ErrLeaseLost", err)
	}
	var third idem.Claim
	for {
		third, err = s.Begin(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if third.Outcome == idem.Acquired {
			break
		}
		if third.Outcome != idem.InFlight {
			t.Fatalf("Begin after the restore = %+v", third)
		}
		time.Sleep(third.RetryAfter)
	}
	if !third.Takeover || third.Owner.Fence <= second.Owner.Fence {
		t.Errorf("claim after the restore = %+v; want a takeover with fence > %d (issued before the restore)", third, second.Owner.Fence)
	}
}

// TestOneRoundTripEach: Begin, MarkStarted, Extend, Complete and a replay
// are one script each on the server (EVALSHA, scripts cached): one round
// trip.
func TestOneRoundTripEach(t *testing.T) {
	t.Parallel()
	s, _, direct := proxied(t, redis.Options{MaxRetries: -1})
	ctx := ctxT(t)
	warm, _ := s.Begin(ctx, idem.BeginRequest{Key: key(t)}) // scripts into the cache
	_ = s.MarkStarted(ctx, warm.Owner)
	_ = s.Extend(ctx, warm.Owner, time.Minute)
	_ = s.Complete(ctx, warm.Owner, nil)
	req := idem.BeginRequest{Key: key(t)}
	var c idem.Claim
	for _, op := range []struct {
		name string
		fn   func() error
	}{
		{"Begin", func() (err error) { c, err = s.Begin(ctx, req); return err }},
		{"MarkStarted", func() error { return s.MarkStarted(ctx, c.Owner) }},
		{"Extend", func() error { return s.Extend(ctx, c.Owner, time.Minute) }},
		{"Complete", func() error { return s.Complete(ctx, c.Owner, []byte("r")) }},
		{"replay", func() error { _, err := s.Begin(ctx, req); return err }},
	} {
		before := evalCalls(t, direct)
		if err := op.fn(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if n := evalCalls(t, direct) - before; n != 1 {
			t.Errorf("%s ran %d scripts on the server, want 1", op.name, n)
		}
	}
}
