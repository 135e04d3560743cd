package redisclient_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/idemkit/idem/redis/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.RueidisLeakOptions()...) }

// target is one way of reaching Redis: a client kind on a topology.
type target struct {
	name   string
	c      redisclient.Client
	prefix string // keys under it; "{…}" in a cluster only where a test wants one slot
}

// targets returns the seam on go-redis and rueidis, on the shared Redis and
// on a private 3-master cluster.
func targets(t *testing.T) []target {
	t.Helper()
	shared, prefix := redistest.RedisClient(t)
	opt := *shared.Options()
	opt.ContextTimeoutEnabled = true
	gr := redis.NewClient(&opt)
	t.Cleanup(func() { gr.Close() })
	cl := testenv.StartRedisCluster(t)
	return []target{
		{"go-redis/single", redisclient.GoRedis(gr), prefix},
		{"rueidis/single", redisclient.Rueidis(redistest.Rueidis(t, opt.Addr)), prefix},
		{"go-redis/cluster", redisclient.GoRedis(redistest.GoRedisCluster(t, cl.Addrs()...)), prefix},
		{"rueidis/cluster", redisclient.Rueidis(redistest.Rueidis(t, cl.Addrs()...)), prefix},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestSeam runs every behaviour the packages rely on, on both clients and
// both topologies, and checks that they answer alike.
func TestSeam(t *testing.T) {
	t.Parallel()
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			c, p := tg.c, tg.prefix+tg.name+":"

			// A script the server has never seen: EVALSHA gets NOSCRIPT,
			// Eval falls back to EVAL, the next call finds it by digest.
			fresh := redisclient.NewScript(fmt.Sprintf("-- %s %d\nreturn {redis.call('INCR', KEYS[1]), ARGV[1], false}", tg.name, time.Now().UnixNano()))
			k := p + "{n}"
			for i := int64(1); i <= 2; i++ {
				v, err := c.Eval(ctx, fresh, []string{k}, "x").Slice()
				if err != nil {
					t.Fatalf("Eval %d: %v", i, err)
				}
				if len(v) != 3 || v[0] != i || v[1] != "x" || v[2] != nil {
					// false in a Lua array is a nil element for both clients.
					t.Fatalf("Eval %d = %#v, want [%d x nil]", i, v, i)
				}
			}
			loaded := 0
			err := c.ForEachMaster(ctx, func(ctx context.Context, n redisclient.Client) error {
				exists, err := n.Do(ctx, "SCRIPT", nil, "EXISTS", fresh.Hash()).Int64s()
				if err == nil && len(exists) == 1 {
					loaded += int(exists[0])
				}
				return err
			})
			if err != nil || loaded != 1 {
				t.Fatalf("SCRIPT EXISTS after the fallback: on %d nodes (%v), want the key's node", loaded, err)
			}

			// Typed replies and their errors.
			if _, err := c.Eval(ctx, redisclient.NewScript("return false"), []string{k}).Int64(); !errors.Is(err, redisclient.ErrNil) {
				t.Fatalf("script returning false: %v, want ErrNil", err)
			}
			if _, err := c.Do(ctx, "GET", []string{p + "missing"}).Text(); !errors.Is(err, redisclient.ErrNil) {
				t.Fatalf("GET missing: %v, want ErrNil", err)
			}
			err = c.Eval(ctx, redisclient.NewScript("return redis.error_reply('BOOM went the script')"), []string{k}).Err()
			if !redisclient.IsServerError(err) || err.Error() != "BOOM went the script" {
				t.Fatalf("error reply: %v (%T), want a ServerError", err, err)
			}
			if n, err := c.Eval(ctx, redisclient.NewScript("return 42"), []string{k}).Int64(); err != nil || n != 42 {
				t.Fatalf("return 42 = %d, %v", n, err)
			}
			if s, err := c.Eval(ctx, redisclient.NewScript("return 'hi'"), []string{k}).Text(); err != nil || s != "hi" {
				t.Fatalf("return 'hi' = %q, %v", s, err)
			}

			// Plain commands, routed by key.
			if err := c.Do(ctx, "SET", []string{p + "s"}, "v", "PX", "60000").Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Do(ctx, "GET", []string{p + "s"}).Text(); err != nil || v != "v" {
				t.Fatalf("GET = %q, %v", v, err)
			}
			if ms, err := c.Do(ctx, "PTTL", []string{p + "s"}).Int64(); err != nil || ms <= 0 {
				t.Fatalf("PTTL = %d, %v", ms, err)
			}
			if n, err := c.Do(ctx, "DEL", []string{p + "s"}).Int64(); err != nil || n != 1 {
				t.Fatalf("DEL = %d, %v", n, err)
			}
			if m, err := c.Do(ctx, "CONFIG", nil, "GET", "maxmemory-policy").Map(); err != nil || m["maxmemory-policy"] == nil {
				t.Fatalf("CONFIG GET = %v, %v", m, err)
			}
		})
	}
}

// TestEvalManyAndForEachMaster writes keys in many slots with one pipelined
// EvalMany, and finds each exactly once by scanning every master.
func TestEvalManyAndForEachMaster(t *testing.T) {
	t.Parallel()
	set := redisclient.NewScript(`redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return ARGV[1]`)
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			p := tg.prefix + tg.name + ":many:"
			calls := make([]redisclient.Call, 200)
			for i := range calls {
				calls[i] = redisclient.Call{Keys: []string{p + strconv.Itoa(i)}, Args: []string{strconv.Itoa(i)}}
			}
			for i, r := range tg.c.EvalMany(ctx, set, calls) {
				if v, err := r.Text(); err != nil || v != strconv.Itoa(i) {
					t.Fatalf("reply %d = %q, %v", i, v, err)
				}
			}
			seen := map[string]int{}
			var mu sync.Mutex
			var nodes int
			err := tg.c.ForEachMaster(ctx, func(ctx context.Context, n redisclient.Client) error {
				nodes++
				cursor := "0"
				for {
					a, err := n.Do(ctx, "SCAN", nil, cursor, "MATCH", p+"*", "COUNT", "1000").Slice()
					if err != nil {
						return err
					}
					keys, _ := redisclient.Reply{}.Strings()
					if ks, ok := a[1].([]any); ok {
						for _, k := range ks {
							keys = append(keys, k.(string))
						}
					}
					mu.Lock()
					for _, k := range keys {
						seen[k]++
					}
					mu.Unlock()
					if cursor = a[0].(string); cursor == "0" {
						return nil
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if tg.name[len(tg.name)-7:] == "cluster" && nodes != 3 {
				t.Fatalf("visited %d masters, want 3", nodes)
			}
			if len(seen) != len(calls) {
				t.Fatalf("scan found %d keys, want %d", len(seen), len(calls))
			}
			for k, n := range seen {
				if n != 1 {
					t.Fatalf("key %s seen on %d masters", k, n)
				}
			}
		})
	}
}

// TestConcurrentEval: 64 goroutines increment one counter through each
// client; every increment is applied once (the clients pipeline and
// multiplex connections; no reply is lost or delivered to the wrong caller).
func TestConcurrentEval(t *testing.T) {
	t.Parallel()
	incr := redisclient.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			key := tg.prefix + tg.name + ":ctr"
			const workers, each = 64, 50
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						// Each caller adds its own amount and checks the
						// reply is consistent with it (a mixed-up reply
						// would break the sum or be below its own amount).
						if n, err := tg.c.Eval(ctx, incr, []string{key}, strconv.Itoa(w+1)).Int64(); err != nil || n < int64(w+1) {
							errs <- fmt.Errorf("incr = %d, %v", n, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			want := int64(each * workers * (workers + 1) / 2)
			if n, err := tg.c.Do(ctx, "GET", []string{key}).Int64(); err != nil || n != want {
				t.Fatalf("counter = %d, %v; want %d", n, err, want)
			}
		})
	}
}

// TestDeadlineOnBlackHole: with Redis unreachable behind a black-holed
// connection, both clients return when ctx ends, with an error that is not
// a server reply.
func TestDeadlineOnBlackHole(t *testing.T) {
	t.Parallel()
	addr := testenv.Redis.Need(t)
	opt, err := redis.ParseURL(addr)
	if err != nil {
		t.Fatal(err)
	}
	script := redisclient.NewScript(`return 1`)
	for _, kind := range []string{"go-redis", "rueidis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := testenv.NewFaultProxy(t, opt.Addr)
			var c redisclient.Client
			if kind == "go-redis" {
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
				t.Cleanup(func() { rdb.Close() })
				c = redisclient.GoRedis(rdb)
			} else {
				c = redisclient.Rueidis(redistest.Rueidis(t, p.Addr()))
			}
			if err := c.Eval(ctxT(t), script, []string{"k"}).Err(); err != nil {
				t.Fatalf("through the proxy before the fault: %v", err)
			}
			p.Set(testenv.BlackHole)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Eval(ctx, script, []string{"k"}).Err() }()
			select {
			case err := <-done:
				if err == nil || redisclient.IsServerError(err) || errors.Is(err, redisclient.ErrNil) {
					t.Fatalf("Eval on a black hole: %v, want a transport or context error", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Eval on a black hole never returned")
			}
			p.Set(testenv.Pass)
		})
	}
}
