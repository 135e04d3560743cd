package shop

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A payment that fails after the channel charged (its connection dropped
// before the charge's recovery point, or its record failed) resumes, on
// the client's retry with the same key, at its first unfinished step: the
// channel is asked again with the charge step's derived key at most, and
// charges once. The shop that retries the request from the top, with a
// new provider key per attempt, charges the order twice, and
// reconciliation reports it.
func TestPaymentResumesAfterTheCharge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v                          Variant
		at                         PayFault
		trades, keyReplays, resume int64
	}{
		{Disciplined, FaultCharged, 1, 1, 1},
		{Disciplined, FaultBeforeRecord, 1, 0, 1},
		{RetriedFromTop, FaultCharged, 2, 0, 0},
		{RetriedFromTop, FaultBeforeRecord, 2, 0, 0},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.v, tc.at), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			st, err := openStack(ctx, Backends{Dir: t.TempDir()}, tc.v, stockFor(10))
			if err != nil {
				t.Fatal(err)
			}
			defer st.close()
			secret := []byte("pay-test-secret")
			// No callbacks: the order is paid by the request's record
			// step alone, never before the retry.
			ch, err := StartChannel(ChannelConfig{Secret: secret, Drop: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			var faulted atomic.Bool
			shop, err := New(Config{DB: st.db, Dialect: st.d, Records: st.records, Durable: st.durable, Tokens: st.tokens,
				Locker: st.locker, Channel: ch.URL(), Secret: secret, Outbox: st.ob, Variant: tc.v,
				FaultFunc: func(_ string, at PayFault) error {
					if at != tc.at || !faulted.CompareAndSwap(false, true) {
						return nil
					}
					if at == FaultCharged {
						panic(http.ErrAbortHandler)
					}
					return errFault
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer shop.Stop()
			srv := httptest.NewServer(shop.Handler())
			defer srv.Close()
			ch.SetNotifyURL(srv.URL + "/callbacks/payment")
			// No connection is reused: the transport never resends the
			// failed attempt by itself, the test's retry does.
			cl := &client{base: srv.URL, http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}

			hdr := map[string]string{CustomerHeader: "c-1", "Idempotency-Key": "order-1"}
			a, err := cl.do(ctx, http.MethodPost, "/orders", hdr, map[string]any{"request_id": "order-1", "sku": "fig", "qty": 2}, 30*time.Second)
			if err != nil || a.status != http.StatusCreated {
				t.Fatalf("place the order: %v (status %d %s)", err, a.status, a.problem)
			}
			o := a.order
			pay := map[string]string{CustomerHeader: "c-1", "Idempotency-Key": "pay-" + o.ID}
			first, err := cl.do(ctx, http.MethodPost, "/orders/"+o.ID+"/pay", pay, nil, 30*time.Second)
			if err == nil && first.status < 500 {
				t.Fatalf("the first attempt succeeded (status %d): no fault was injected", first.status)
			}
			retry, err := cl.do(ctx, http.MethodPost, "/orders/"+o.ID+"/pay", pay, nil, 30*time.Second)
			if err != nil || retry.status != http.StatusOK {
				t.Fatalf("the retry: %v (status %d %s)", err, retry.status, retry.problem)
			}

			var charges int64
			for _, tr := range ch.Ledger().Trades {
				if tr.OrderID == o.ID {
					charges++
				}
			}
			if charges != tc.trades {
				t.Errorf("the channel charged the order %d times, want %d", charges, tc.trades)
			}
			if n := ch.Stats().KeyReplays; n != tc.keyReplays {
				t.Errorf("the channel answered %d charges from their key, want %d", n, tc.keyReplays)
			}
			if n := shop.C.Resumed.Load(); n != tc.resume {
				t.Errorf("%d payment retries resumed from a recovery point, want %d", n, tc.resume)
			}
			var paid int
			if err := st.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders WHERE id = '`+o.ID+`' AND status = 'PAID'`).Scan(&paid); err != nil || paid != 1 {
				t.Errorf("order not PAID after the retry: %v", err)
			}
			diffs, err := Reconcile(ctx, st.db, ch.Ledger())
			if err != nil {
				t.Fatal(err)
			}
			var double int64
			for _, d := range diffs {
				if d.Kind == DiffChargeDuplicate {
					double++
				}
			}
			if want := min(tc.trades-1, 1); double != want {
				t.Errorf("reconciliation found %d orders charged twice, want %d: %v", double, want, diffs)
			}
		})
	}
}
