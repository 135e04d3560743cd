package shop

import (
	"context"
	"testing"
	"time"
)

// A clean shop reconciles to nothing; then duplicates and mismatches are
// planted directly in the database, behind every defence's back, and the
// reconciler must report each one.
func TestReconcileFindsPlantedDuplicates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := openStack(ctx, Backends{Dir: t.TempDir()}, Disciplined, map[string]int64{"apple": 100, "pear": 100})
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := st.db.ExecContext(ctx, rebind(st.d, q), args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A consistent history: two orders paid, one refunded in part, one shipped.
	exec(`INSERT INTO orders (id, request_id, customer, sku, qty, amount, status, paid_amount, refunded) VALUES ('o1', 'r1', 'c', 'apple', 2, 240, 'SHIPPED', 240, 100)`)
	exec(`INSERT INTO orders (id, request_id, customer, sku, qty, amount, status, paid_amount, refunded) VALUES ('o2', 'r2', 'c', 'pear', 1, 250, 'PAID', 250, 0)`)
	exec(`UPDATE stock SET qty = qty - 2 WHERE sku = 'apple'`)
	exec(`UPDATE stock SET qty = qty - 1 WHERE sku = 'pear'`)
	exec(`INSERT INTO payments (id, trade_no, order_id, amount) VALUES ('p1', 'T1', 'o1', 240)`)
	exec(`INSERT INTO payments (id, trade_no, order_id, amount) VALUES ('p2', 'T2', 'o2', 250)`)
	exec(`INSERT INTO refunds (refund_no, order_id, amount) VALUES ('rf1', 'o1', 100)`)
	exec(`INSERT INTO shipments (id, order_id, tracking) VALUES ('m1', 'o1', 'TRK-o1')`)
	ledger := Ledger{
		Trades:  []Trade{{"T1", "o1", 240, "SUCCESS"}, {"T2", "o2", 250, "SUCCESS"}},
		Refunds: []ChannelRefund{{"rf1", "T1", "o1", 100}},
	}
	if diffs, err := Reconcile(ctx, st.db, ledger); err != nil || len(diffs) != 0 {
		t.Fatalf("clean history: %v %v", diffs, err)
	}

	// Plant. Each line is one thing a broken layer could have left behind.
	exec(`DROP INDEX orders_request_id`)
	exec(`INSERT INTO orders (id, request_id, customer, sku, qty, amount, status) VALUES ('o3', 'r1', 'c', 'apple', 2, 240, 'CREATED')`) // second order for request r1 (stock not taken: also a stock mismatch)
	exec(`INSERT INTO payments (id, trade_no, order_id, amount) VALUES ('p3', 'T9', 'o2', 250)`)                                         // a second payment for o2, unknown to the channel
	exec(`INSERT INTO refunds (refund_no, order_id, amount) VALUES ('rf2', 'o1', 200)`)                                                  // o1: 100 + 200 refunded of 240 paid; never sent, not on the order
	exec(`INSERT INTO shipments (id, order_id, tracking) VALUES ('m2', 'o1', 'TRK-o1')`)                                                 // o1 shipped twice
	exec(`INSERT INTO orders (id, request_id, customer, sku, qty, amount, status) VALUES ('o4', 'r4', 'c', 'pear', 1, 250, 'PAYING')`)
	exec(`UPDATE stock SET qty = qty - 1 WHERE sku = 'pear'`)
	exec(`INSERT INTO shipments (id, order_id, tracking) VALUES ('m3', 'o4', 'TRK-o4')`) // shipped, never paid
	ledger.Trades = append(ledger.Trades, Trade{"T5", "o4", 250, "SUCCESS"})             // charged by the channel, callback lost
	ledger.Trades[0].Amount = 200                                                        // the channel says T1 was 200
	ledger.Trades = append(ledger.Trades, Trade{"T6", "o2", 250, "SUCCESS"})             // the channel charged o2 a second time
	ledger.Refunds = append(ledger.Refunds, ChannelRefund{"rf9", "T2", "o2", 50})        // refunded by the channel only

	diffs, err := Reconcile(ctx, st.db, ledger)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // kind -> the order (or SKU) it must name
		DiffOrderDuplicate:    "o3",
		DiffPaymentDuplicate:  "o2",
		DiffChargeDuplicate:   "o2",
		DiffPaymentUnknown:    "o2",
		DiffOverRefund:        "o1",
		DiffRefundSum:         "o1",
		DiffRefundMissing:     "o1",
		DiffRefundUnknown:     "o2",
		DiffShipmentDuplicate: "o1",
		DiffShipmentUnpaid:    "o4",
		DiffPaymentMissing:    "o4",
		DiffPaymentAmount:     "o1",
		DiffStock:             "", // apple: o3's 2 units never left the stock
	}
	got := map[string]bool{}
	for _, d := range diffs {
		t.Log(d)
		if o, ok := want[d.Kind]; ok && o == d.Order {
			got[d.Kind] = true
		}
	}
	for kind, o := range want {
		if !got[kind] {
			t.Errorf("planted %s (order %q) not reported", kind, o)
		}
	}
}
