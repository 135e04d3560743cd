// Package httpbench measures the HTTP middleware and the idem proxy over
// real loopback HTTP: a small closed-loop load generator (Load), the
// benchmarks in this directory, a load command (./load) and a demo
// upstream service (./upstream).
package httpbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// KeyMode says which Idempotency-Key each request carries.
type KeyMode string

const (
	UniqueKeys KeyMode = "unique" // a fresh key per request: every request executes
	SameKey    KeyMode = "same"   // one key: after the first, every request is a replay
	NoKey      KeyMode = "none"   // no key header
)

// Load sends n POST requests to url from workers concurrent connections
// (closed loop: each worker sends its next request when the previous
// answer has been read) and returns how long that took and how many
// answers had an unexpected status (not 2xx). prefix makes keys unique
// across runs.
func Load(ctx context.Context, client *http.Client, url string, workers, n int, mode KeyMode, prefix string) (time.Duration, int64, error) {
	var next, bad atomic.Int64
	var firstErr error
	var errOnce sync.Once
	body := `{"amount":4200,"currency":"EUR","description":"benchmark order"}`
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Authorization", "Bearer sk_bench") // the caller: keys are scoped by it
				switch mode {
				case UniqueKeys:
					r.Header.Set("Idempotency-Key", prefix+strconv.FormatInt(i, 10))
				case SameKey:
					r.Header.Set("Idempotency-Key", prefix+"same")
				}
				resp, err := client.Do(r)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), bad.Load(), firstErr
}

// NewClient returns a keep-alive client that holds one idle connection
// per worker.
func NewClient(workers int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = workers * 2
	tr.MaxIdleConnsPerHost = workers * 2
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// Handler is the service the benchmarks protect: it reads the body and
// answers 201 with a small JSON document, like a typical create endpoint.
func Handler() http.Handler {
	var seq atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d","status":"succeeded","amount":4200}`, seq.Add(1))
	})
}

// Side is one server of a Compare run.
type Side struct {
	URL  string
	Mode KeyMode
}

// Compare measures sides in alternating rounds of round requests each (the
// order flips every round), n requests per side in all, so that load from
// the rest of the machine falls on every side alike. For each side it
// returns the requests per second and the CPU time this process (client
// and server together) spent per request, which other processes' load
// does not inflate.
func Compare(ctx context.Context, sides []Side, workers, n, round int, prefix string) (rates []float64, cpuPerReq []time.Duration, err error) {
	// keyPrefix keeps one key per side in SameKey mode (stored by the
	// warm-up) and makes unique keys unique across rounds.
	keyPrefix := func(side, round int) string {
		if sides[side].Mode == SameKey {
			return prefix + "s" + strconv.Itoa(side) + "-"
		}
		return prefix + strconv.Itoa(side) + "-" + strconv.Itoa(round) + "-"
	}
	clients := make([]*http.Client, len(sides))
	for i := range sides {
		clients[i] = NewClient(workers)
		defer clients[i].CloseIdleConnections()
		// Warm up the connections (and store the replayed result).
		if err := WarmUp(ctx, clients[i], sides[i].URL, workers, sides[i].Mode, keyPrefix(i, -1)); err != nil {
			return nil, nil, err
		}
	}
	total := make([]time.Duration, len(sides))
	cpu := make([]time.Duration, len(sides))
	for done, r := 0, 0; done < n; r++ {
		k := min(round, n-done)
		for j := range sides {
			i := j
			if r%2 == 1 {
				i = len(sides) - 1 - j
			}
			c0 := CPUTime()
			d, bad, err := Load(ctx, clients[i], sides[i].URL, workers, k, sides[i].Mode, keyPrefix(i, r))
			cpu[i] += CPUTime() - c0
			if err != nil {
				return nil, nil, err
			}
			if bad > 0 {
				return nil, nil, fmt.Errorf("%s: %d non-2xx answers", sides[i].URL, bad)
			}
			total[i] += d
		}
		done += k
	}
	rates = make([]float64, len(sides))
	cpuPerReq = make([]time.Duration, len(sides))
	for i, d := range total {
		rates[i] = float64(n) / d.Seconds()
		cpuPerReq[i] = cpu[i] / time.Duration(n)
	}
	return rates, cpuPerReq, nil
}

// CPUTime returns the user and system CPU time this process has used.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// WarmUp opens the connections with a few requests. In SameKey mode it
// first stores the key's result with one request, so that every later
// request with that key is a replay (not a 409 while the first runs).
func WarmUp(ctx context.Context, client *http.Client, url string, workers int, mode KeyMode, prefix string) error {
	if mode == SameKey {
		if _, bad, err := Load(ctx, client, url, 1, 1, mode, prefix); err != nil || bad > 0 {
			return fmt.Errorf("warm-up: %v (%d non-2xx)", err, bad)
		}
	}
	if mode != SameKey {
		prefix += "w"
	}
	_, _, err := Load(ctx, client, url, workers, workers, mode, prefix)
	return err
}
