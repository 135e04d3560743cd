package redisstore_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/idemkit/idem/redis/redisstore"
)

// switchDialer is the client side of the replica tests: every connection
// of the store's client goes to the current target (Switch changes it and
// closes the open connections, as a load balancer or a sentinel would after
// a failover), and every write the client makes is counted and classified.
type switchDialer struct {
	target atomic.Pointer[string]

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	writes []string // the bytes of each write, while recording
	dials  int      // connections dialled while recording
	record bool
}

func newSwitchDialer(addr string) *switchDialer {
	d := &switchDialer{conns: make(map[net.Conn]struct{})}
	d.target.Store(&addr)
	return d
}

func (d *switchDialer) dial(ctx context.Context) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", *d.target.Load())
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c, d: d}
	d.mu.Lock()
	if d.record {
		d.dials++
	}
	d.conns[cc] = struct{}{}
	d.mu.Unlock()
	return cc, nil
}

// Switch points new connections at addr and closes the open ones.
func (d *switchDialer) Switch(addr string) {
	d.target.Store(&addr)
	d.mu.Lock()
	open := make([]net.Conn, 0, len(d.conns))
	for c := range d.conns {
		open = append(open, c)
	}
	d.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

// Record starts (on) or stops recording the client's writes and dials,
// and returns the writes recorded so far and the number of dials.
func (d *switchDialer) Record(on bool) ([]string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out, dials := d.writes, d.dials
	d.writes, d.dials, d.record = nil, 0, on
	return out, dials
}

type countingConn struct {
	net.Conn
	d *switchDialer
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.d.mu.Lock()
	if c.d.record {
		c.d.writes = append(c.d.writes, string(b))
	}
	c.d.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countingConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
	return c.Conn.Close()
}

// storeVia returns a store with cfg whose client, of the suite's kind,
// dials through d.
func storeVia(t testing.TB, d *switchDialer, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	return storeViaKind(t, suiteClient, d, cfg)
}

// storeViaKind is storeVia on the client of kind.
func storeViaKind(t testing.TB, kind string, d *switchDialer, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	opt := &redis.Options{
		Addr:                  *d.target.Load(),
		ContextTimeoutEnabled: true,
		ReadTimeout:           5 * time.Second,
		Dialer:                func(ctx context.Context, _, _ string) (net.Conn, error) { return d.dial(ctx) },
	}
	if kind == testenv.RueidisKind {
		ro := redisclient.RueidisOption(opt)
		ro.DialCtxFn = func(ctx context.Context, _ string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.dial(ctx)
		}
		rc, err := rueidis.NewClient(ro)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		s, err := redisstore.NewRueidis(rc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hget reads one field of a record from addr (the replica) with a command
// of its own.
func hget(t *testing.T, addr, key, field string) string {
	t.Helper()
	v, err := testenv.RedisCommand(addr, "HGET", key, field)
	if err != nil {
		t.Fatalf("HGET %s %s on %s: %v", key, field, addr, err)
	}
	return v
}

// TestWaitReplicasOnReplica: with WaitReplicas 1, each write that decides
// ownership or a result is on the replica when the call returns, although
// the replication link is slow (50ms each way). The same calls without
// WaitReplicas return before the replica has the write: the test can tell.
func TestWaitReplicasOnReplica(t *testing.T) {
	t.Parallel()
	pair := testenv.StartRedisPair(t)
	pair.Link.SetLatency(50 * time.Millisecond)
	ctx := ctxT(t)
	d := newSwitchDialer(pair.Master.Addr())
	s := storeVia(t, d, &redisstore.Config{WaitReplicas: 1, WaitTimeout: 3 * time.Second})
	replica := pair.Replica.Addr()

	k := key(t)
	c, err := s.Begin(ctx, idem.BeginRequest{Key: k, Lease: time.Minute})
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", c, err)
	}
	if v := hget(t, replica, s.Key(k), "s"); v != "p" {
		t.Fatalf("after Begin the replica has state %q, want p", v)
	}
	if err := s.MarkStarted(ctx, c.Owner); err != nil {
		t.Fatal(err)
	}
	if v := hget(t, replica, s.Key(k), "m"); v != "1" {
		t.Fatalf("after MarkStarted the replica has mark %q, want 1", v)
	}
	lu := hget(t, replica, s.Key(k), "lu")
	if err := s.Extend(ctx, c.Owner, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := hget(t, replica, s.Key(k), "lu"); v == lu {
		t.Fatalf("after Extend the replica still has lease %s", v)
	}
	if err := s.Complete(ctx, c.Owner, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if v := hget(t, replica, s.Key(k), "res"); v != "done" {
		t.Fatalf("after Complete the replica has result %q, want done", v)
	}
	if c, err := s.Begin(ctx, idem.BeginRequest{Key: k}); err != nil || c.Outcome != idem.Replay {
		t.Fatalf("Begin after Complete = %+v, %v; want Replay", c, err)
	}

	k2 := key(t)
	c2, err := s.Begin(ctx, idem.BeginRequest{Key: k2, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c2.Owner); err != nil {
		t.Fatal(err)
	}
	if v := hget(t, replica, s.Key(k2), "s"); v != "r" {
		t.Fatalf("after Release the replica has state %q, want r", v)
	}
	k3 := key(t)
	o3, err := s.Adopt(ctx, idem.BeginRequest{Key: k3, Lease: time.Minute}, idem.NewToken())
	if err != nil {
		t.Fatal(err)
	}
	if v := hget(t, replica, s.Key(k3), "f"); v != strconv.FormatUint(o3.Fence, 10) {
		t.Fatalf("after Adopt the replica has fence %q, want %d", v, o3.Fence)
	}

	// The control: without WAIT the call returns before the slow link
	// has carried the write.
	plain := storeVia(t, d, &redisstore.Config{AllowAsyncReplication: true})
	k4 := key(t)
	if _, err := plain.Begin(ctx, idem.BeginRequest{Key: k4}); err != nil {
		t.Fatal(err)
	}
	if v := hget(t, replica, plain.Key(k4), "s"); v != "" {
		t.Fatalf("without WaitReplicas the replica already had the claim (state %q): the test cannot tell", v)
	}
}

// TestWaitReplicasFailClosed: the replica stops answering (its link is a
// black hole; the master still lists it). Begin, Complete, Release,
// MarkStarted and a replay fail with an unavailable error that matches
// ErrNotReplicated, after about WaitTimeout; nothing is acknowledged. When
// the link heals, the same calls succeed.
func TestWaitReplicasFailClosed(t *testing.T) {
	t.Parallel()
	pair := testenv.StartRedisPair(t)
	ctx := ctxT(t)
	d := newSwitchDialer(pair.Master.Addr())
	const wait = time.Second
	s := storeVia(t, d, &redisstore.Config{WaitReplicas: 1, WaitTimeout: wait})
	// The records before the cut, through a client of their own, so that
	// s's connections have written nothing the replica lacks.
	setup := storeVia(t, newSwitchDialer(pair.Master.Addr()), &redisstore.Config{WaitReplicas: 1, WaitTimeout: 4 * time.Second})
	held, err := setup.Begin(ctx, idem.BeginRequest{Key: key(t), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := key(t)
	dc, err := setup.Begin(ctx, idem.BeginRequest{Key: done})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.Complete(ctx, dc.Owner, []byte("r")); err != nil {
		t.Fatal(err)
	}

	pair.Link.Set(testenv.BlackHole)
	unavailable := func(what string, err error, start time.Time) {
		t.Helper()
		if !idem.IsUnavailable(err) || !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Fatalf("%s with the replica cut off = %v; want an unavailable ErrNotReplicated", what, err)
		}
		// Generous: the bound is WaitTimeout, the slack is for a busy machine.
		if el := time.Since(start); el < wait || el > wait+20*time.Second {
			t.Fatalf("%s failed after %v, want about %v", what, el, wait)
		}
	}
	// The replay first, on connections that have written nothing since
	// the cut: its WAIT is not held up by an earlier write of its own.
	// (Redis 7.0 makes a WAIT after a command that wrote nothing wait for
	// the master's whole stream anyway; the replay's own write makes the
	// store not depend on that.)
	start := time.Now()
	unavailable("Begin (replay)", func() error { _, err := s.Begin(ctx, idem.BeginRequest{Key: done}); return err }(), start)
	start = time.Now()
	c, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)})
	unavailable("Begin", err, start)
	if c.Outcome == idem.Acquired {
		t.Fatalf("Begin answered %+v with an error", c)
	}
	start = time.Now()
	unavailable("MarkStarted", s.MarkStarted(ctx, held.Owner), start)
	start = time.Now()
	unavailable("Complete", s.Complete(ctx, held.Owner, []byte("x")), start)

	pair.Link.Set(testenv.Pass)
	pair.Link.ResetAll() // the stalled link reconnects at once
	// The same Complete again: the record is completed on the master by
	// this owner, and once the replica is back it acknowledges it.
	for {
		err := s.Complete(ctx, held.Owner, []byte("x"))
		if err == nil {
			break
		}
		if !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Fatalf("Complete after the link healed: %v", err)
		}
	}
	if v := hget(t, pair.Replica.Addr(), s.Key(held.Owner.Key), "res"); v != "x" {
		t.Fatalf("the replica has result %q, want x", v)
	}
}

// TestWaitReplicasOneWrite: WAIT costs no client round trip. The client
// makes exactly one write per Begin and per Complete with WaitReplicas as
// without, and with WaitReplicas each of those writes carries both the
// script and the WAIT; no WAIT goes out on a write of its own.
func TestWaitReplicasOneWrite(t *testing.T) {
	t.Parallel()
	pair := testenv.StartRedisPair(t)
	ctx := ctxT(t)
	const n = 20
	count := func(cfg *redisstore.Config) (writes, scripts, waits, bare int) {
		d := newSwitchDialer(pair.Master.Addr())
		s := storeVia(t, d, cfg)
		run := func() {
			for range n {
				c, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
					t.Fatal(err)
				}
			}
		}
		run() // warm: connections dialled, scripts cached
		d.Record(true)
		run()
		recorded, dials := d.Record(false)
		if dials != 0 {
			t.Fatalf("the client dialled %d connections during the measured calls", dials)
		}
		for _, w := range recorded {
			b := bytes.ToLower([]byte(w))
			ev := bytes.Contains(b, []byte("evalsha"))
			wt := bytes.Contains(b, []byte("\r\nwait\r\n"))
			switch {
			case ev && wt:
				scripts++
				waits++
			case ev:
				scripts++
			case wt:
				bare++
			default:
				continue // a keep-alive PING of the client, not ours
			}
			writes++
		}
		return writes, scripts, waits, bare
	}
	w0, s0, _, _ := count(&redisstore.Config{AllowAsyncReplication: true})
	w1, s1, waits, bare := count(&redisstore.Config{WaitReplicas: 1})
	if w0 != 2*n || s0 != 2*n {
		t.Fatalf("without WaitReplicas: %d writes, %d scripts for %d Begin+Complete; want %d", w0, s0, n, 2*n)
	}
	if w1 != w0 || s1 != s0 || waits != s1 || bare != 0 {
		t.Fatalf("with WaitReplicas 1: %d writes (%d with a script, %d of them with WAIT, %d WAIT alone); "+
			"without: %d writes. Want the same writes, each script with its WAIT", w1, s1, waits, bare, w0)
	}
}

// TestWaitReplicasConcurrent: callers race on one key through
// idem.Do with WaitReplicas; the work runs exactly once and every caller
// gets its result.
func TestWaitReplicasConcurrent(t *testing.T) {
	t.Parallel()
	pair := testenv.StartRedisPair(t)
	ctx := ctxT(t)
	d := newSwitchDialer(pair.Master.Addr())
	s := storeVia(t, d, &redisstore.Config{WaitReplicas: 1})
	for range 5 {
		k := key(t)
		var runs atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := idem.Do(ctx, s, k, &idem.Options{Wait: true, PollInterval: 5 * time.Millisecond}, func(context.Context) (string, error) {
					runs.Add(1)
					time.Sleep(10 * time.Millisecond)
					return "once", nil
				})
				if err == nil && v != "once" {
					err = errors.New("got " + v)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("the work ran %d times, want 1", n)
		}
		if v := hget(t, pair.Replica.Addr(), s.Key(k), "s"); v != "c" {
			t.Fatalf("the replica has state %q after every caller was answered, want c", v)
		}
	}
}

// syncBuffer is a log sink safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestReplicationVerdicts: Replication's verdict and Check's and Begin's
// answers for each topology: one server; a master with a replica, without
// WaitReplicas (refused unless AllowAsyncReplication, which warns), with
// WaitReplicas 1, and with more WaitReplicas than replicas (a warning);
// and a client pointed at the replica (unknown).
func TestReplicationVerdicts(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	single := testenv.StartRedis(t)
	pair := testenv.StartRedisPair(t)
	type want struct {
		mode             idem.ReplicationMode
		replicas, waits  int
		checkAsync, warn bool
	}
	for _, tc := range []struct {
		name string
		addr string
		cfg  redisstore.Config
		want want
	}{
		{"single", single.Addr(), redisstore.Config{}, want{mode: idem.ReplicationSingle}},
		{"single, WaitReplicas 1", single.Addr(), redisstore.Config{WaitReplicas: 1},
			want{mode: idem.ReplicationSynchronous, waits: 1, warn: true}},
		{"async", pair.Master.Addr(), redisstore.Config{}, want{mode: idem.ReplicationAsynchronous, replicas: 1, checkAsync: true}},
		{"async allowed", pair.Master.Addr(), redisstore.Config{AllowAsyncReplication: true},
			want{mode: idem.ReplicationAsynchronous, replicas: 1, warn: true}},
		{"WaitReplicas 1", pair.Master.Addr(), redisstore.Config{WaitReplicas: 1},
			want{mode: idem.ReplicationSynchronous, replicas: 1, waits: 1}},
		{"WaitReplicas 2", pair.Master.Addr(), redisstore.Config{WaitReplicas: 2},
			want{mode: idem.ReplicationSynchronous, replicas: 1, waits: 2, warn: true}},
		{"on the replica", pair.Replica.Addr(), redisstore.Config{}, want{mode: idem.ReplicationUnknown, replicas: 0, warn: true}},
	} {
		var logs syncBuffer
		cfg := tc.cfg
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		s := storeVia(t, newSwitchDialer(tc.addr), &cfg)
		r, err := s.Replication(ctx)
		if err != nil {
			t.Fatalf("%s: Replication: %v", tc.name, err)
		}
		if r.Mode != tc.want.mode || r.Replicas != tc.want.replicas || r.Waits != tc.want.waits || r.Detail == "" {
			t.Errorf("%s: Replication = %+v, want %+v", tc.name, r, tc.want)
		}
		err = s.Check(ctx)
		if tc.want.checkAsync {
			if !errors.Is(err, idem.ErrAsyncReplication) || !idem.IsUnavailable(err) {
				t.Errorf("%s: Check = %v, want ErrAsyncReplication", tc.name, err)
			}
			_, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)})
			if !errors.Is(err, idem.ErrAsyncReplication) || !idem.IsUnavailable(err) {
				t.Errorf("%s: Begin = %v, want ErrAsyncReplication", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Check = %v", tc.name, err)
		}
		if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.want.warn {
			t.Errorf("%s: Check warned %v, want %v: %s", tc.name, warned, tc.want.warn, logs.String())
		}
	}
}

// TestAsyncRefusalFollowsReplicas: a store without WaitReplicas grants
// claims on a lone master, refuses once a replica attaches (the verdict
// is read again by a Begin after it has aged, without a goroutine), and
// grants again once the replica is gone.
func TestAsyncRefusalFollowsReplicas(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	master := testenv.StartRedis(t)
	s := storeVia(t, newSwitchDialer(master.Addr()), nil)
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)}); err != nil {
		t.Fatalf("Begin on a lone master: %v", err)
	}
	replica, _ := testenv.StartRedisReplica(t, master)
	until := func(what string, ok func(error) bool) {
		t.Helper()
		for {
			_, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)})
			if ok(err) {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: Begin still answers %v", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	until("replica attached", func(err error) bool { return errors.Is(err, idem.ErrAsyncReplication) })
	replica.Kill()
	until("replica gone", func(err error) bool { return err == nil })
}
