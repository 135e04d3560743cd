package shop

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/onetime/formtoken"
)

// benchShop is a shop with a well-behaved channel (no resends, no forgeries)
// and an in-process shipping consumer, for throughput.
type benchShop struct {
	st   *stack
	shop *Shop
	ch   *Channel
	cl   *client
	stop func()
}

func newBenchShop(b *testing.B, be Backends, orders int) *benchShop {
	b.Helper()
	ctx := context.Background()
	be.Dir = b.TempDir()
	st, err := openStack(ctx, be, Disciplined, stockFor(orders+1000))
	if err != nil {
		b.Fatal(err)
	}
	secret := []byte("bench-secret")
	ch, err := StartChannel(ChannelConfig{Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{DB: st.db, Dialect: st.d, Records: st.records, Durable: st.durable, Tokens: st.tokens, Locker: st.locker,
		Channel: ch.URL(), Secret: secret, Outbox: st.ob, Publisher: st.pub})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	ch.SetNotifyURL(base + "/callbacks/payment")
	s.Start()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = consume(cctx, st.childConfig(Disciplined), func(string, string) {})
	}()
	bs := &benchShop{st: st, shop: s, ch: ch, cl: &client{base: base, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}}
	bs.stop = func() {
		cancel()
		<-done
		s.Stop()
		_ = srv.Close()
		_ = ch.Close()
		st.close()
	}
	return bs
}

func (bs *benchShop) place(b *testing.B, i int64, prefix string) Order {
	o, err := bs.tryPlace(i, prefix)
	if err != nil {
		b.Fatal(err)
	}
	return o
}

// tryPlace places one order, retrying the 503 of a busy stock lock.
func (bs *benchShop) tryPlace(i int64, prefix string) (Order, error) {
	reqID, body := orderBody(i, prefix)
	hdr := map[string]string{CustomerHeader: "bench", "Idempotency-Key": reqID}
	for attempt := 0; ; attempt++ {
		a, err := bs.cl.do(context.Background(), http.MethodPost, "/orders", hdr, body, 30*time.Second)
		if err == nil && (a.status == http.StatusCreated || a.status == http.StatusOK) {
			return a.order, nil
		}
		if attempt == 10 || err == nil && a.status != http.StatusServiceUnavailable && a.status != http.StatusConflict {
			return Order{}, fmt.Errorf("place: %v %d %s", err, a.status, a.problem)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// orderBody is order i's request: the SKUs take turns (one lock per SKU).
func orderBody(i int64, prefix string) (string, map[string]any) {
	reqID := fmt.Sprintf("%s-%d", prefix, i)
	return reqID, map[string]any{"request_id": reqID, "sku": []string{"apple", "pear", "plum", "fig"}[i%4], "qty": 1}
}

func benchBackends(b *testing.B, name string) Backends {
	switch name {
	case "embedded":
		return Backends{}
	case "postgres+redis+nats":
		return Backends{Postgres: testenv.Postgres.Need(b), Redis: testenv.Redis.Need(b), Queue: testenv.NATS.Need(b)}
	}
	b.Fatal("unknown backends")
	return Backends{}
}

// BenchmarkOrderFlow: orders per second through the whole flow (place with
// an Idempotency-Key, open the cashier, the channel's signed callback, the
// outbox, the broker, the inbox consumer shipping it), 8 clients at once.
// The clock stops when the last order is SHIPPED.
func BenchmarkOrderFlow(b *testing.B) {
	for _, name := range []string{"embedded", "postgres+redis+nats"} {
		b.Run(name, func(b *testing.B) {
			bs := newBenchShop(b, benchBackends(b, name), b.N)
			defer bs.stop()
			var seq atomic.Int64
			prefix := randomID("")
			b.SetParallelism(4) // 4 × GOMAXPROCS (2 here) = 8 clients
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					o, err := bs.tryPlace(seq.Add(1), prefix)
					if err != nil {
						b.Error(err)
						return
					}
					// A 503 says "retry with the same key" (a payment
					// interrupted between its steps resumes): the client
					// does, as the storm's does.
					var a answer
					for try := 0; ; try++ {
						a, err = bs.cl.do(context.Background(), http.MethodPost, "/orders/"+o.ID+"/pay", map[string]string{CustomerHeader: "bench", "Idempotency-Key": "pay-" + o.ID}, nil, 30*time.Second)
						if err != nil || a.status != http.StatusServiceUnavailable || try == 10 {
							break
						}
						b.Logf("pay %s: %d %s; retrying with the same key", o.ID, a.status, a.problem)
						time.Sleep(max(retryAfterHeader(a.header), 50*time.Millisecond))
					}
					if err != nil || a.status != http.StatusOK {
						b.Errorf("pay: %v %d %s", err, a.status, a.problem)
						return
					}
				}
			})
			for deadline := time.Now().Add(time.Minute); !b.Failed(); {
				if time.Now().After(deadline) {
					b.Fatal("orders not all shipped within a minute")
				}
				var n int
				if err := bs.st.db.QueryRow(`SELECT COUNT(*) FROM orders WHERE status = 'SHIPPED'`).Scan(&n); err != nil {
					b.Fatal(err)
				}
				if n >= b.N {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "orders/s")
		})
	}
}

// BenchmarkLayers: what each step and layer costs per order, in one run, so
// the ratios compare like with like. All over loopback HTTP except the
// callback and ship steps, which are called directly.
//
//	place/bare        the order handler alone: lock, INSERT with the unique index, fenced stock UPDATE
//	place/httpidem    + the Idempotency-Key middleware over tiered (fast store, then sqlstore)
//	place/formtoken   + a form token: GET /form (Issue), then the submit through formtoken
//	replay/httpidem   a duplicate answered by the fast path
//	pay/fsm           CREATED -> PAYING (one conditional UPDATE) + the channel's trade
//	callback          signature, unique trade_no, PAYING -> PAID, outbox row: one transaction
//	ship/inbox        dedup row + PAID -> SHIPPED + shipment row: one transaction
func BenchmarkLayers(b *testing.B) {
	for _, name := range []string{"embedded", "postgres+redis+nats"} {
		b.Run(name, func(b *testing.B) {
			bs := newBenchShop(b, benchBackends(b, name), 100000)
			defer bs.stop()
			ctx := context.Background()
			prefix := randomID("")
			var seq atomic.Int64
			bare := httpServe(b, http.HandlerFunc(bs.shop.placeOrder))
			b.Run("place/bare", func(b *testing.B) {
				for range b.N {
					reqID := fmt.Sprintf("%s-bare-%d", prefix, seq.Add(1))
					a, err := bare.do(ctx, http.MethodPost, "/", map[string]string{CustomerHeader: "bench"}, map[string]any{"request_id": reqID, "sku": "apple", "qty": 1}, 30*time.Second)
					if err != nil || a.status != http.StatusCreated {
						b.Fatalf("%v %d", err, a.status)
					}
				}
			})
			b.Run("place/httpidem", func(b *testing.B) {
				for range b.N {
					bs.place(b, seq.Add(1), prefix+"-key")
				}
			})
			b.Run("place/formtoken", func(b *testing.B) {
				hdr := map[string]string{CustomerHeader: "bench"}
				for range b.N {
					tok := formToken(ctx, bs.cl, hdr)
					reqID := fmt.Sprintf("%s-form-%d", prefix, seq.Add(1))
					a, err := bs.cl.do(ctx, http.MethodPost, "/orders", map[string]string{CustomerHeader: "bench", formtoken.DefaultHeader: tok},
						map[string]any{"request_id": reqID, "sku": "apple", "qty": 1}, 30*time.Second)
					if err != nil || a.status != http.StatusCreated {
						b.Fatalf("%v %d %s", err, a.status, a.problem)
					}
				}
			})
			b.Run("replay/httpidem", func(b *testing.B) {
				i := seq.Add(1)
				bs.place(b, i, prefix+"-dup")
				reqID, body := orderBody(i, prefix+"-dup")
				hdr := map[string]string{CustomerHeader: "bench", "Idempotency-Key": reqID}
				b.ResetTimer()
				for range b.N {
					a, err := bs.cl.do(ctx, http.MethodPost, "/orders", hdr, body, 30*time.Second)
					if err != nil || a.header.Get("Idempotent-Replayed") != "true" {
						b.Fatalf("%v %d", err, a.status)
					}
				}
			})
			// Orders for the payment steps, made outside the timer.
			mk := func(n int) []Order {
				os := make([]Order, n)
				for i := range os {
					os[i] = bs.place(b, seq.Add(1), prefix+"-pay")
				}
				return os
			}
			b.Run("pay/fsm", func(b *testing.B) {
				b.StopTimer()
				os := mk(b.N)
				b.StartTimer()
				for _, o := range os {
					a, err := bs.cl.do(ctx, http.MethodPost, "/orders/"+o.ID+"/pay", map[string]string{CustomerHeader: "bench", "Idempotency-Key": "pay-" + o.ID}, nil, 30*time.Second)
					if err != nil || a.status != http.StatusOK {
						b.Fatalf("%v %d", err, a.status)
					}
				}
				b.StopTimer()
				bs.ch.Drain()
			})
			b.Run("callback", func(b *testing.B) {
				b.StopTimer()
				var ns []Notification
				for _, o := range mk(b.N) {
					if _, err := bs.st.db.Exec(rebind(bs.st.d, `UPDATE orders SET status = 'PAYING' WHERE id = ?`), o.ID); err != nil {
						b.Fatal(err)
					}
					n := Notification{TradeNo: randomID("T"), OrderID: o.ID, Amount: o.Amount, Status: "SUCCESS"}
					n.Sign = sign([]byte("bench-secret"), n)
					ns = append(ns, n)
				}
				b.StartTimer()
				for _, n := range ns {
					if err := bs.shop.applyPayment(ctx, n, false); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("ship/inbox", func(b *testing.B) {
				b.StopTimer()
				os := mk(b.N)
				for _, o := range os {
					if _, err := bs.st.db.Exec(rebind(bs.st.d, `UPDATE orders SET status = 'PAID' WHERE id = ?`), o.ID); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				for _, o := range os {
					id := "bench-ship:" + o.ID
					_, err := bs.st.ib.Process(ctx, "bench-shipping", id, func(ctx context.Context, tx *sql.Tx) error {
						if _, err := bs.shop.machine.Fire(ctx, tx, o.ID, "ship", nil); err != nil {
							return err
						}
						_, err := tx.ExecContext(ctx, rebind(bs.st.d, `INSERT INTO shipments (id, order_id, tracking) VALUES (?, ?, ?)`), id, o.ID, "TRK")
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func httpServe(b *testing.B, h http.Handler) *client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return &client{base: "http://" + ln.Addr().String(), http: &http.Client{}}
}
