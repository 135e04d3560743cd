package shop

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Comparison is the disciplined storm next to each anti-pattern's.
type Comparison struct {
	Baseline *Result   `json:"baseline"`
	Variants []*Result `json:"variants"`
	Flood    Flood     `json:"flood"`
}

// Flood is the database's load under a flood of duplicates of one order,
// with and without the fast path in front of it.
type Flood struct {
	Duplicates  int   `json:"duplicates"`
	WithFast    int64 `json:"statements_with_fast_path"`
	WithoutFast int64 `json:"statements_without_fast_path"`
	FastName    string
}

// Stopped is the share of duplicate-answering statements the fast path kept
// away from the database.
func (f Flood) Stopped() float64 {
	if f.WithoutFast == 0 {
		return 0
	}
	return 1 - float64(f.WithFast)/float64(f.WithoutFast)
}

// RunCompare runs the storm on the disciplined shop and on every variant,
// all at once (two at a time on PostgreSQL), then the flood. The storms share nothing but the machine
// (each has its own database, stores, queue, channel and consumer
// processes), and most of a storm's time is waiting (client timeouts and
// backoff, the lease a pause outlives, the channel's delays and resends, the
// consumer's restarts), so eight at once take little longer than the
// slowest. Every storm has cfg.Orders orders, except RejectWithoutRedis (see
// rejectOrders). progress, when set, gets a line as each storm starts and
// ends and one every few seconds in between; cfg.Progress is not used.
func RunCompare(ctx context.Context, cfg StormConfig, progress io.Writer) (*Comparison, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // one progress line at a time
	say := func(format string, a ...any) {
		if progress != nil {
			mu.Lock()
			fmt.Fprintf(progress, format, a...)
			mu.Unlock()
		}
	}
	all := append([]Variant{Disciplined}, Variants...)
	results := make([]*Result, len(all))
	var (
		firstErr error
		failOnce sync.Once
	)
	placed := make([]atomic.Int64, len(all))
	done := make([]atomic.Bool, len(all))
	total := 0
	for _, v := range all {
		total += stormOrders(cfg, v)
	}
	// On PostgreSQL each storm holds up to 21 connections (its pool, its
	// consumer's, the schema's admin): two at a time stay far below a
	// server's default 100, which other clients share.
	limit := make(chan struct{}, len(all))
	if cfg.Backends.Postgres != "" {
		limit = make(chan struct{}, 2)
	}
	start := time.Now()
	stopTicker := make(chan struct{})
	var tickerWG sync.WaitGroup
	if progress != nil {
		tickerWG.Add(1)
		go func() {
			defer tickerWG.Done()
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stopTicker:
					return
				case <-t.C:
					var n int64
					var running []string
					for i, v := range all {
						n += placed[i].Load()
						if !done[i].Load() {
							running = append(running, v.String())
						}
					}
					line := fmt.Sprintf("  %4.0fs   orders placed %d/%d, %d of %d storms to finish", time.Since(start).Seconds(), n, total, len(running), len(all))
					if len(running) <= 3 {
						line += ": " + strings.Join(running, ", ")
					}
					say("%s\n", line)
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for i, v := range all {
		vc := cfg
		vc.Variant, vc.Progress, vc.Placed, vc.Orders = v, nil, &placed[i], stormOrders(cfg, v)
		note := ""
		if vc.Orders != cfg.Orders {
			note = fmt.Sprintf("; not %d orders: each is refused only after a client's dozen retries", cfg.Orders)
		}
		select {
		case limit <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			done[i].Store(true)
			continue
		}
		say("  started %-24s %d orders (%s%s)\n", v, vc.Orders, v.Rule(), note)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-limit }()
			defer done[i].Store(true)
			r, err := RunStorm(ctx, vc)
			if err != nil {
				failOnce.Do(func() {
					firstErr = fmt.Errorf("%s: %w", v, err)
					cancel() // the comparison is void: stop the others
				})
				return
			}
			results[i] = r
			outcome := fmt.Sprintf("%d violations", len(r.Violations))
			if v != Disciplined {
				outcome = fmt.Sprintf("%s: %d", v.Damage(), r.Damage())
			}
			say("  done    %-24s in %s, %s\n", v, r.Duration.Round(100*time.Millisecond), outcome)
		}()
	}
	wg.Wait()
	close(stopTicker)
	tickerWG.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &Comparison{Baseline: results[0], Variants: results[1:]}
	var err error
	c.Flood, err = RunFlood(ctx, cfg.Backends, 1000)
	if err != nil {
		return nil, fmt.Errorf("flood: %w", err)
	}
	return c, nil
}

// stormOrders is the number of orders of variant v's storm.
func stormOrders(cfg StormConfig, v Variant) int {
	if v == RejectWithoutRedis && cfg.Orders > rejectOrders {
		return rejectOrders
	}
	return cfg.Orders
}

// rejectOrders is what the RejectWithoutRedis variant is scaled down to:
// every one of its orders is refused alike, each only after a client's dozen
// retries (each waiting at least the Retry-After of 1 s that the 503
// carries: about 12 s an order), so more orders show the same damage and
// only make the comparison wait. One order per client at the default 16
// clients.
const rejectOrders = 16

// RunFlood places one order with an Idempotency-Key, then sends n duplicates
// of it, once through the tiered store (fast path in front of the database)
// and once through the database store alone, and counts the database
// statements each flood cost.
func RunFlood(ctx context.Context, b Backends, n int) (Flood, error) {
	f := Flood{Duplicates: n, FastName: "memory store"}
	if b.Redis != "" {
		f.FastName = "Redis"
	}
	for _, withFast := range []bool{true, false} {
		st, err := openStack(ctx, b, Disciplined, stockFor(1))
		if err != nil {
			return f, err
		}
		count, err := flood(ctx, st, withFast, n)
		st.close()
		if err != nil {
			return f, err
		}
		if withFast {
			f.WithFast = count
		} else {
			f.WithoutFast = count
		}
	}
	return f, nil
}

func flood(ctx context.Context, st *stack, withFast bool, n int) (int64, error) {
	records := st.records
	if !withFast {
		records = st.durable
	}
	shop, err := New(Config{DB: st.db, Dialect: st.d, Records: records, Tokens: st.tokens, Locker: st.locker, Publisher: st.pub})
	if err != nil {
		return 0, err
	}
	defer shop.Stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: shop.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	cl := &client{base: "http://" + ln.Addr().String(), http: &http.Client{Transport: &http.Transport{}}}
	defer cl.http.CloseIdleConnections()
	hdr := map[string]string{CustomerHeader: "flood", "Idempotency-Key": "flood-1"}
	body := map[string]any{"request_id": "flood-1", "sku": "apple", "qty": 1}
	if a, err := cl.do(ctx, http.MethodPost, "/orders", hdr, body, 10*time.Second); err != nil || a.status != http.StatusCreated {
		return 0, fmt.Errorf("first order: %v (status %d)", err, a.status)
	}
	before := st.stmts.Count()
	for range n {
		a, err := cl.do(ctx, http.MethodPost, "/orders", hdr, body, 10*time.Second)
		if err != nil {
			return 0, err
		}
		if a.header.Get("Idempotent-Replayed") != "true" {
			return 0, fmt.Errorf("duplicate not replayed: status %d", a.status)
		}
	}
	return st.stmts.Count() - before, nil
}
