// Command clients measures redisstore's Begin script (redisstore/lua/begin.lua,
// the acquire path: a fresh key per call) through internal/redisclient on
// go-redis and on rueidis, next to redis-benchmark running the same EVALSHA
// with the same key length and arguments, at 1, 16 and 64 concurrent callers.
//
//	go run ./bench/redisstore/clients -rounds 5 -n 20000
//
// Rounds interleave the three sides (their order rotates each round) so that
// the drift of a shared machine's load hits all of them alike; the table
// shows medians of ops/s and of the per-round ratios, and the client CPU per
// operation (user+sys of this process over the run, so it includes the Go
// runtime; redis-benchmark's own CPU is not counted anywhere).
//
// go-redis gets max(c, its default) pooled connections, so that it is never
// starved at 64 callers; rueidis uses its defaults (automatic pipelining on
// one connection). Keys live under a fresh prefix, expire within a minute
// (the script's retention), and are deleted at the end; the server is never
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

	"github.com/idemkit/idem/internal/redisclient"
)

var (
	addr   = flag.String("addr", "127.0.0.1:6379", "Redis host:port")
	rounds = flag.Int("rounds", 5, "interleaved rounds")
	n      = flag.Int("n", 20000, "operations per run, every side")
	script = flag.String("script", "redisstore/lua/begin.lua", "the Begin script")
	concs  = flag.String("c", "1,16,64", "concurrent callers")
)

const (
	lease  = "30000000" // µs, as redisstore's benchmarks
	retain = "60000000"
)

var (
	fp  = strings.Repeat("f", 32)
	tok = strings.Repeat("t", 16)
	pad = strings.Repeat("x", 52) // key length like a Prefix + 64 hex digits
)

type sample struct{ ops, cpuPerOp float64 } // ops/s, µs of CPU per op

func main() {
	flag.Parse()
	src, err := os.ReadFile(*script)
	if err != nil {
		log.Fatal(err)
	}
	s := redisclient.NewScript(string(src))
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	prefix := "idembench_" + hex.EncodeToString(raw[:]) + ":" + pad
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
	goClients := map[int]redisclient.Client{}
	for _, c := range cs {
		rdb := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true, PoolSize: max(c, 10*2)})
		defer rdb.Close()
		goClients[c] = redisclient.GoRedis(rdb)
	}
	ctx := context.Background()
	if err := redisclient.Rueidis(ru).Do(ctx, "SCRIPT", nil, "LOAD", string(src)).Err(); err != nil {
		log.Fatal(err)
	}
	defer cleanup(ru, prefix)

	sides := []string{"go-redis", "rueidis", "redis-benchmark"}
	res := map[string]map[int][]sample{}
	for _, sd := range sides {
		res[sd] = map[int][]sample{}
	}
	var seq atomic.Int64
	for r := 0; r < *rounds; r++ {
		for _, c := range cs {
			for i := range sides {
				sd := sides[(i+r)%len(sides)]
				var smp sample
				switch sd {
				case "go-redis":
					smp = runGo(ctx, goClients[c], s, c, prefix, &seq)
				case "rueidis":
					smp = runGo(ctx, redisclient.Rueidis(ru), s, c, prefix, &seq)
				default:
					smp = runRB(s.Hash(), c, prefix+"rb"+strconv.Itoa(r))
				}
				res[sd][c] = append(res[sd][c], smp)
				fmt.Printf("round %d  c=%-3d %-16s %9.0f ops/s  %6.2f µs CPU/op\n", r+1, c, sd, smp.ops, smp.cpuPerOp)
			}
		}
	}

	fmt.Printf("\nmedians over %d rounds, %d ops per run\n", *rounds, *n)
	fmt.Println("| callers | go-redis ops/s | rueidis ops/s | redis-benchmark ops/s | rueidis / r-b | go-redis / r-b | rueidis / go-redis | CPU µs/op go-redis | CPU µs/op rueidis |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, c := range cs {
		g, u, b := res["go-redis"][c], res["rueidis"][c], res["redis-benchmark"][c]
		ratio := func(x, y []sample) (out []float64) {
			for i := range x {
				out = append(out, x[i].ops/y[i].ops)
			}
			return
		}
		fmt.Printf("| %d | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %.1f | %.1f |\n", c,
			med(ops(g)), med(ops(u)), med(ops(b)),
			med(ratio(u, b)), med(ratio(g, b)), med(ratio(u, g)),
			med(cpu(g)), med(cpu(u)))
	}
	fmt.Println("\nper-round ratios (rueidis/r-b, go-redis/r-b, rueidis/go-redis):")
	for _, c := range cs {
		fmt.Printf("c=%d:", c)
		for i := range res["go-redis"][c] {
			g, u, b := res["go-redis"][c][i].ops, res["rueidis"][c][i].ops, res["redis-benchmark"][c][i].ops
			fmt.Printf("  %.2f/%.2f/%.2f", u/b, g/b, u/g)
		}
		fmt.Println()
	}
}

// runGo runs n Begin calls on fresh keys from c goroutines.
func runGo(ctx context.Context, cl redisclient.Client, s *redisclient.Script, c int, prefix string, seq *atomic.Int64) sample {
	var left atomic.Int64
	left.Store(int64(*n))
	var wg sync.WaitGroup
	var failed atomic.Int64
	cpu0 := cpuTime()
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var key []byte
			for left.Add(-1) >= 0 {
				key = strconv.AppendInt(append(key[:0], prefix...), seq.Add(1), 10)
				a, err := cl.Eval(ctx, s, []string{string(key)}, fp, tok, lease, retain).Slice()
				if err != nil || len(a) == 0 || a[0] != int64(1) {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if f := failed.Load(); f > 0 {
		log.Fatalf("%d Begin calls did not acquire", f)
	}
	return sample{ops: float64(*n) / el.Seconds(), cpuPerOp: float64((cpuTime() - cpu0).Microseconds()) / float64(*n)}
}

// runRB runs redis-benchmark with the same EVALSHA on random fresh keys.
func runRB(sha string, c int, prefix string) sample {
	host, port, _ := strings.Cut(*addr, ":")
	out, err := exec.Command("redis-benchmark", "-h", host, "-p", port, "-c", strconv.Itoa(c), "-n", strconv.Itoa(*n),
		"-r", "1000000000", "--csv", "EVALSHA", sha, "1", prefix+"__rand_int__", fp, tok, lease, retain).Output()
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
