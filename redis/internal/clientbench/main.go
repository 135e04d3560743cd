// Command clients measures redisstore's Begin on go-redis and on rueidis,
// next to redis-benchmark running the same EVALSHA of redis/redisstore/lua/begin.lua
// with the same key length and arguments, at 1, 16 and 64 concurrent
// callers:
//
//	go run ./redis/internal/clientbench -rounds 5 -n 20000 -ops script,acquire,replay
//
// Operations: "script" is the Begin script alone through
// redis/internal/redisclient (no store) on a fresh key per call, what the client
// costs; "acquire" is Store.Begin of a fresh key (redisstore.New on
// go-redis, redisstore.NewRueidis on rueidis), what an application sees;
// "replay" is Store.Begin of a completed key, answered with its 64-byte
// result.
//
// Rounds interleave the three sides of every operation (their order rotates
// each round) so that the drift of a shared machine's load hits all of them
// alike; the tables show medians of ops/s and of the per-round ratios, and
// the client CPU per operation (user+sys of this process over the run, so it
// includes the Go runtime; redis-benchmark's own CPU is not counted
// anywhere).
//
// go-redis gets max(c, 20) pooled connections, so that it is never starved at
// 64 callers; rueidis uses its defaults (automatic pipelining on one
// connection). Keys live under a fresh prefix, expire within a minute (the
// requests' retention), and are deleted at the end; the server is never
// flushed.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/idemkit/idem/redis/redisstore"
)

var (
	addr   = flag.String("addr", "127.0.0.1:6379", "Redis host:port")
	rounds = flag.Int("rounds", 5, "interleaved rounds")
	n      = flag.Int("n", 20000, "operations per run, every side")
	script = flag.String("script", "redis/redisstore/lua/begin.lua", "the Begin script")
	concs  = flag.String("c", "1,16,64", "concurrent callers")
	opList = flag.String("ops", "script,acquire,replay", "operations to measure")
)

const (
	lease    = 30 * time.Second // as redisstore's benchmarks
	retain   = time.Minute
	resultSz = 64 // the replayed result, as bench/redisstore/run.sh
)

var (
	fp     = strings.Repeat("f", 32) // the fingerprint every request carries
	tok    = strings.Repeat("t", 16)
	pad    = strings.Repeat("x", 52) // key length like a Prefix + 64 hex digits
	leaseA = strconv.FormatInt(lease.Microseconds(), 10)
	retA   = strconv.FormatInt(retain.Microseconds(), 10)
)

// Sides of every operation, in the order of the first round.
const (
	goRedis = "go-redis"
	ruSide  = "rueidis"
	rbSide  = "redis-benchmark"
)

var sides = []string{goRedis, ruSide, rbSide}

type sample struct{ ops, cpuPerOp float64 } // ops/s, µs of CPU per op

// call is one operation by one caller; i is unique across all calls.
type call func(ctx context.Context, i int64) error

// operation is what one table measures: a call per client (built for c
// callers) and the redis-benchmark command line of the same EVALSHA.
type operation struct {
	name   string
	client map[string]func(c int) call
	rb     func(round int) []string
}

func main() {
	flag.Parse()
	src, err := os.ReadFile(*script)
	if err != nil {
		log.Fatal(err)
	}
	s := redisclient.NewScript(string(src))
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	base := "idembench_" + hex.EncodeToString(raw[:]) + ":"
	var cs []int
	for _, f := range strings.Split(*concs, ",") {
		c, err := strconv.Atoi(f)
		if err != nil {
			log.Fatal(err)
		}
		cs = append(cs, c)
	}

	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*addr}})
	if err != nil {
		log.Fatal(err)
	}
	defer ru.Close()
	goClients := map[int]*redis.Client{}
	for _, c := range cs {
		rdb := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true, PoolSize: max(c, 10*2)})
		defer rdb.Close()
		goClients[c] = rdb
	}
	ctx := context.Background()
	if err := redisclient.Rueidis(ru).Do(ctx, "SCRIPT", nil, "LOAD", string(src)).Err(); err != nil {
		log.Fatal(err)
	}
	defer cleanup(ru, base)

	all := map[string]operation{
		"script":  scriptOp(s, ru, goClients, base+pad),
		"acquire": acquireOp(ru, goClients, base, s.Hash()),
		"replay":  replayOp(ctx, ru, goClients, base, s.Hash()),
	}
	var ops []operation
	for _, name := range strings.Split(*opList, ",") {
		op, ok := all[name]
		if !ok {
			log.Fatalf("unknown operation %q (script, acquire, replay)", name)
		}
		ops = append(ops, op)
	}

	// res[op][side][c]: one sample per round.
	res := map[string]map[string]map[int][]sample{}
	var seq atomic.Int64
	for r := 0; r < *rounds; r++ {
		for _, op := range ops {
			if res[op.name] == nil {
				res[op.name] = map[string]map[int][]sample{}
				for _, sd := range sides {
					res[op.name][sd] = map[int][]sample{}
				}
			}
			for _, c := range cs {
				for i := range sides {
					sd := sides[(i+r)%len(sides)]
					var smp sample
					if sd == rbSide {
						smp = runRB(c, op.rb(r))
					} else {
						smp = runGo(ctx, op.client[sd](c), c, &seq)
					}
					res[op.name][sd][c] = append(res[op.name][sd][c], smp)
					fmt.Printf("round %d  %-40s c=%-3d %-16s %9.0f ops/s  %6.2f µs CPU/op\n", r+1, op.name, c, sd, smp.ops, smp.cpuPerOp)
				}
			}
		}
	}

	fmt.Printf("\nmedians over %d rounds, %d ops per run\n", *rounds, *n)
	for _, op := range ops {
		table(op.name, res[op.name], cs)
	}
}

// table prints one operation's medians and per-round ratios.
func table(name string, res map[string]map[int][]sample, cs []int) {
	fmt.Printf("\n%s\n\n", name)
	fmt.Println("| callers | go-redis ops/s | rueidis ops/s | redis-benchmark ops/s | rueidis / r-b | go-redis / r-b | rueidis / go-redis | CPU µs/op go-redis | CPU µs/op rueidis |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	ratio := func(x, y []sample) (out []float64) {
		for i := range x {
			out = append(out, x[i].ops/y[i].ops)
		}
		return
	}
	for _, c := range cs {
		g, u, b := res[goRedis][c], res[ruSide][c], res[rbSide][c]
		fmt.Printf("| %d | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %.1f | %.1f |\n", c,
			med(ops(g)), med(ops(u)), med(ops(b)),
			med(ratio(u, b)), med(ratio(g, b)), med(ratio(u, g)),
			med(cpu(g)), med(cpu(u)))
	}
	fmt.Println("\nper-round ratios (rueidis/r-b, go-redis/r-b, rueidis/go-redis):")
	for _, c := range cs {
		fmt.Printf("c=%d:", c)
		for i := range res[goRedis][c] {
			g, u, b := res[goRedis][c][i].ops, res[ruSide][c][i].ops, res[rbSide][c][i].ops
			fmt.Printf("  %.2f/%.2f/%.2f", u/b, g/b, u/g)
		}
		fmt.Println()
	}
}

// scriptOp: the Begin script through redisclient on a fresh key per call.
func scriptOp(s *redisclient.Script, ru rueidis.Client, goClients map[int]*redis.Client, prefix string) operation {
	on := func(cl redisclient.Client) call {
		return func(ctx context.Context, i int64) error {
			key := strconv.AppendInt([]byte(prefix), i, 10)
			a, err := cl.Eval(ctx, s, []string{string(key)}, fp, tok, leaseA, retA).Slice()
			if err != nil {
				return err
			}
			if len(a) == 0 || a[0] != int64(1) {
				return fmt.Errorf("begin script replied %v, want acquired", a)
			}
			return nil
		}
	}
	return operation{
		name: "begin.lua through redisclient (acquire)",
		client: map[string]func(int) call{
			goRedis: func(c int) call { return on(redisclient.GoRedis(goClients[c])) },
			ruSide:  func(int) call { return on(redisclient.Rueidis(ru)) },
		},
		rb: func(r int) []string { return evalsha(s.Hash(), prefix+"rb"+strconv.Itoa(r)+"__rand_int__") },
	}
}

// stores returns the store constructors of both clients, keys under
// prefix.
func stores(ru rueidis.Client, goClients map[int]*redis.Client, prefix string) map[string]func(c int) *redisstore.Store {
	cfg := &redisstore.Config{Prefix: prefix}
	must := func(s *redisstore.Store, err error) *redisstore.Store {
		if err != nil {
			log.Fatal(err)
		}
		return s
	}
	ruStore := must(redisstore.NewRueidis(ru, cfg))
	return map[string]func(int) *redisstore.Store{
		goRedis: func(c int) *redisstore.Store { return must(redisstore.New(goClients[c], cfg)) },
		ruSide:  func(int) *redisstore.Store { return ruStore },
	}
}

// storeCalls gives each client's store the call on.
func storeCalls(st map[string]func(c int) *redisstore.Store, on func(*redisstore.Store) call) map[string]func(c int) call {
	out := map[string]func(int) call{}
	for side, store := range st {
		out[side] = func(c int) call { return on(store(c)) }
	}
	return out
}

func request(k idem.Key) idem.BeginRequest {
	return idem.BeginRequest{Key: k, Fingerprint: idem.Fingerprint([]byte(fp)), Lease: lease, Retention: retain}
}

// acquireOp: Store.Begin on a fresh key per call. The store's keys are
// prefix + 64 hex digits; redis-benchmark's are prefix + 52 + 12 digits.
func acquireOp(ru rueidis.Client, goClients map[int]*redis.Client, base, sha string) operation {
	prefix := base + "a:"
	st := stores(ru, goClients, prefix)
	on := func(s *redisstore.Store) call {
		return func(ctx context.Context, i int64) error {
			c, err := s.Begin(ctx, request(idem.MustKey("bench", strconv.FormatInt(i, 10))))
			if err != nil {
				return err
			}
			if c.Outcome != idem.Acquired {
				return fmt.Errorf("begin of a fresh key: %v", c.Outcome)
			}
			return nil
		}
	}
	return operation{
		name:   "Store.Begin, acquire (fresh key)",
		client: storeCalls(st, on),
		rb: func(r int) []string {
			return evalsha(sha, fmt.Sprintf("%s%s%02d__rand_int__", prefix, pad[:50], r%100))
		},
	}
}

// replayOp: Store.Begin of one completed key, every call a replay of its
// 64-byte result. The record is kept for an hour (the run may take longer
// than the requests' retention) and deleted at the end.
func replayOp(ctx context.Context, ru rueidis.Client, goClients map[int]*redis.Client, base, sha string) operation {
	prefix := base + "r:"
	st := stores(ru, goClients, prefix)
	key := idem.MustKey("bench", "replay")
	s := st[ruSide](0)
	first := request(key)
	first.Retention = time.Hour
	claim, err := s.Begin(ctx, first)
	if err != nil || claim.Outcome != idem.Acquired {
		log.Fatalf("replay record: Begin: %v, %v", claim.Outcome, err)
	}
	if err := s.Complete(ctx, claim.Owner, []byte(strings.Repeat("r", resultSz))); err != nil {
		log.Fatalf("replay record: Complete: %v", err)
	}
	on := func(s *redisstore.Store) call {
		return func(ctx context.Context, _ int64) error {
			c, err := s.Begin(ctx, request(key))
			if err != nil {
				return err
			}
			if c.Outcome != idem.Replay || len(c.Result) != resultSz {
				return fmt.Errorf("begin of the completed key: %v, %d bytes", c.Outcome, len(c.Result))
			}
			return nil
		}
	}
	return operation{
		name:   "Store.Begin, replay (completed key)",
		client: storeCalls(st, on),
		rb:     func(int) []string { return evalsha(sha, s.Key(key)) },
	}
}

// evalsha is redis-benchmark's command: the Begin script on key with the
// Go side's arguments.
func evalsha(sha, key string) []string {
	return []string{"EVALSHA", sha, "1", key, fp, tok, leaseA, retA}
}

// runGo runs n calls from c goroutines.
func runGo(ctx context.Context, op call, c int, seq *atomic.Int64) sample {
	var left atomic.Int64
	left.Store(int64(*n))
	var wg sync.WaitGroup
	var failed atomic.Int64
	var first atomic.Value
	cpu0 := cpuTime()
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := op(ctx, seq.Add(1)); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if f := failed.Load(); f > 0 {
		log.Fatalf("%d calls failed, the first: %v", f, first.Load())
	}
	return sample{ops: float64(*n) / el.Seconds(), cpuPerOp: float64((cpuTime() - cpu0).Microseconds()) / float64(*n)}
}

// runRB runs redis-benchmark with c connections on cmd; __rand_int__ in a
// key makes it fresh per call.
func runRB(c int, cmd []string) sample {
	host, port, _ := strings.Cut(*addr, ":")
	args := append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(c), "-n", strconv.Itoa(*n),
		"-r", "1000000000", "--csv"}, cmd...)
	out, err := exec.Command("redis-benchmark", args...).Output()
	if err != nil {
		log.Fatalf("redis-benchmark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Split(lines[len(lines)-1], "\"")
	if len(f) < 4 {
		log.Fatalf("redis-benchmark output: %s", out)
	}
	v, err := strconv.ParseFloat(f[3], 64)
	if err != nil {
		log.Fatalf("redis-benchmark output: %s", out)
	}
	return sample{ops: v}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func cleanup(ru rueidis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cursor := "0"
	for {
		e, err := ru.Do(ctx, ru.B().Scan().Cursor(mustU(cursor)).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return
		}
		if len(e.Elements) > 0 {
			ru.Do(ctx, ru.B().Unlink().Key(e.Elements...).Build())
		}
		if e.Cursor == 0 {
			return
		}
		cursor = strconv.FormatUint(e.Cursor, 10)
	}
}

func mustU(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }

func ops(x []sample) (o []float64) {
	for _, s := range x {
		o = append(o, s.ops)
	}
	return
}

func cpu(x []sample) (o []float64) {
	for _, s := range x {
		o = append(o, s.cpuPerOp)
	}
	return
}

func med(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	if len(y)%2 == 1 {
		return y[len(y)/2]
	}
	return (y[len(y)/2-1] + y[len(y)/2]) / 2
}
