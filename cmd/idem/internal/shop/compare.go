package shop

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
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

// RunCompare runs the storm on the disciplined shop and on every variant
// (each with orders/len(Variants)... the same cfg.Orders), then the flood.
func RunCompare(ctx context.Context, cfg StormConfig, progress io.Writer) (*Comparison, error) {
	c := &Comparison{}
	base := cfg
	base.Variant = Disciplined
	r, err := RunStorm(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("disciplined: %w", err)
	}
	c.Baseline = r
	for _, v := range Variants {
		vc := cfg
		vc.Variant = v
		note := ""
		if v == RejectWithoutRedis && vc.Orders > 8*rejectOrders {
			// Every order of this variant is refused alike, each after a
			// client's dozen retries (about 2.3 s): an eighth of the orders
			// shows the same damage in an eighth of the time.
			vc.Orders /= 8
			note = fmt.Sprintf("; %d of the %d orders: every one is refused after a client's dozen retries", vc.Orders, cfg.Orders)
		}
		if progress != nil {
			fmt.Fprintf(progress, "  running %s (%s%s)\n", v, v.Rule(), note)
		}
		start := time.Now()
		r, err := RunStorm(ctx, vc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v, err)
		}
		if progress != nil {
			fmt.Fprintf(progress, "  %s done in %s\n", v, time.Since(start).Round(100*time.Millisecond))
		}
		c.Variants = append(c.Variants, r)
	}
	c.Flood, err = RunFlood(ctx, cfg.Backends, 1000)
	if err != nil {
		return nil, fmt.Errorf("flood: %w", err)
	}
	return c, nil
}

// rejectOrders is the fewest orders the RejectWithoutRedis variant is
// scaled down to.
const rejectOrders = 50

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
