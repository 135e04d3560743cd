package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
)

// Difference is one thing reconciliation found wrong.
type Difference struct {
	Kind   string `json:"kind"`
	Order  string `json:"order,omitempty"`
	Ref    string `json:"ref,omitempty"` // trade number, refund number or shipment id
	Detail string `json:"detail"`
}

func (d Difference) String() string {
	return fmt.Sprintf("%s order=%s ref=%s: %s", d.Kind, d.Order, d.Ref, d.Detail)
}

// Kinds of differences.
const (
	DiffPaymentMissing    = "payment-missing"    // the channel charged, the shop has no payment
	DiffPaymentUnknown    = "payment-unknown"    // the shop has a payment the channel never made
	DiffPaymentAmount     = "payment-amount"     // amounts differ
	DiffPaymentDuplicate  = "payment-duplicate"  // more than one payment for an order
	DiffChargeDuplicate   = "charge-duplicate"   // the channel charged one order more than once
	DiffRefundMissing     = "refund-missing"     // the shop refunded, the channel has no refund
	DiffRefundUnknown     = "refund-unknown"     // the channel refunded, the shop has no refund
	DiffRefundAmount      = "refund-amount"      // refund amounts differ
	DiffOverRefund        = "over-refund"        // refunds exceed the payment
	DiffRefundSum         = "refund-sum"         // orders.refunded differs from its refund rows
	DiffShipmentDuplicate = "shipment-duplicate" // more than one shipment for an order
	DiffShipmentUnpaid    = "shipment-unpaid"    // a shipment for an order without a payment
	DiffStatus            = "status-mismatch"    // paid but not PAID/SHIPPED, or PAID/SHIPPED without payment
	DiffOrderDuplicate    = "order-duplicate"    // more than one order for one request_id
	DiffStock             = "stock-mismatch"     // initial - remaining != units ordered
)

type shopPayment struct {
	id, tradeNo, order string
	amount             int64
}
type shopRefund struct {
	no, order string
	amount    int64
}
type shopOrder struct {
	id, request, status      string
	qty, paid, refunded, amt int64
	sku                      string
}

// Reconcile compares the shop's payments, refunds, shipments and stock with
// the channel's ledger and with each other, and returns every difference,
// sorted. It writes nothing.
func Reconcile(ctx context.Context, db *sql.DB, l Ledger) ([]Difference, error) {
	var diffs []Difference
	add := func(kind, order, ref, format string, a ...any) {
		diffs = append(diffs, Difference{kind, order, ref, fmt.Sprintf(format, a...)})
	}
	orders := map[string]shopOrder{}
	byRequest := map[string][]string{}
	err := query(ctx, db, `SELECT id, request_id, status, qty, paid_amount, refunded, amount, sku FROM orders`, func(r *sql.Rows) error {
		var o shopOrder
		if err := r.Scan(&o.id, &o.request, &o.status, &o.qty, &o.paid, &o.refunded, &o.amt, &o.sku); err != nil {
			return err
		}
		orders[o.id] = o
		byRequest[o.request] = append(byRequest[o.request], o.id)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var pays []shopPayment
	payByOrder := map[string][]shopPayment{}
	payByTrade := map[string]shopPayment{}
	err = query(ctx, db, `SELECT id, trade_no, order_id, amount FROM payments`, func(r *sql.Rows) error {
		var p shopPayment
		if err := r.Scan(&p.id, &p.tradeNo, &p.order, &p.amount); err != nil {
			return err
		}
		pays = append(pays, p)
		payByOrder[p.order] = append(payByOrder[p.order], p)
		payByTrade[p.tradeNo] = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	refunds := map[string]shopRefund{}
	refundSum := map[string]int64{}
	err = query(ctx, db, `SELECT refund_no, order_id, amount FROM refunds`, func(r *sql.Rows) error {
		var x shopRefund
		if err := r.Scan(&x.no, &x.order, &x.amount); err != nil {
			return err
		}
		refunds[x.no] = x
		refundSum[x.order] += x.amount
		return nil
	})
	if err != nil {
		return nil, err
	}
	shipments := map[string][]string{}
	err = query(ctx, db, `SELECT id, order_id FROM shipments`, func(r *sql.Rows) error {
		var id, o string
		if err := r.Scan(&id, &o); err != nil {
			return err
		}
		shipments[o] = append(shipments[o], id)
		return nil
	})
	if err != nil {
		return nil, err
	}

	// Payments against the channel's trades.
	trades := map[string]Trade{}
	for _, t := range l.Trades {
		trades[t.TradeNo] = t
		p, ok := payByTrade[t.TradeNo]
		switch {
		case !ok:
			add(DiffPaymentMissing, t.OrderID, t.TradeNo, "the channel charged %d, the shop has no payment", t.Amount)
		case p.amount != t.Amount || p.order != t.OrderID:
			add(DiffPaymentAmount, p.order, t.TradeNo, "shop %d for %s, channel %d for %s", p.amount, p.order, t.Amount, t.OrderID)
		}
	}
	chargesByOrder := map[string][]string{}
	for _, t := range l.Trades {
		chargesByOrder[t.OrderID] = append(chargesByOrder[t.OrderID], t.TradeNo)
	}
	for o, ts := range chargesByOrder {
		if len(ts) > 1 {
			add(DiffChargeDuplicate, o, ts[1], "the channel charged the order %d times", len(ts))
		}
	}
	for _, p := range pays {
		if _, ok := trades[p.tradeNo]; !ok {
			add(DiffPaymentUnknown, p.order, p.tradeNo, "payment %s of %d is not in the channel's ledger", p.id, p.amount)
		}
	}
	for o, ps := range payByOrder {
		if len(ps) > 1 {
			add(DiffPaymentDuplicate, o, ps[1].tradeNo, "%d payments for one order", len(ps))
		}
	}

	// Refunds against the channel's refunds, and against the payments.
	chRefunds := map[string]ChannelRefund{}
	for _, r := range l.Refunds {
		chRefunds[r.RefundNo] = r
		x, ok := refunds[r.RefundNo]
		switch {
		case !ok:
			add(DiffRefundUnknown, r.OrderID, r.RefundNo, "the channel refunded %d, the shop has no refund", r.Amount)
		case x.amount != r.Amount:
			add(DiffRefundAmount, x.order, r.RefundNo, "shop %d, channel %d", x.amount, r.Amount)
		}
	}
	for _, x := range refunds {
		if _, ok := chRefunds[x.no]; !ok {
			add(DiffRefundMissing, x.order, x.no, "refund of %d not at the channel", x.amount)
		}
	}
	for _, o := range orders {
		var paid int64
		for _, p := range payByOrder[o.id] {
			paid += p.amount
		}
		if refundSum[o.id] > paid {
			add(DiffOverRefund, o.id, "", "refunds %d exceed payments %d", refundSum[o.id], paid)
		}
		if refundSum[o.id] != o.refunded {
			add(DiffRefundSum, o.id, "", "order says %d refunded, refund rows sum to %d", o.refunded, refundSum[o.id])
		}
		settled := o.status == StatePaid || o.status == StateShipped
		switch {
		case len(payByOrder[o.id]) > 0 && !settled:
			add(DiffStatus, o.id, "", "paid but %s", o.status)
		case len(payByOrder[o.id]) == 0 && settled:
			add(DiffStatus, o.id, "", "%s without a payment", o.status)
		}
		if s := shipments[o.id]; len(s) > 1 {
			add(DiffShipmentDuplicate, o.id, s[1], "%d shipments", len(s))
		}
		if len(shipments[o.id]) > 0 && len(payByOrder[o.id]) == 0 {
			add(DiffShipmentUnpaid, o.id, shipments[o.id][0], "shipped, never paid")
		}
	}
	for req, ids := range byRequest {
		if len(ids) > 1 {
			add(DiffOrderDuplicate, ids[1], req, "%d orders for request %s", len(ids), req)
		}
	}

	// Stock: what left the shelf is what was ordered.
	ordered := map[string]int64{}
	for _, o := range orders {
		ordered[o.sku] += o.qty
	}
	err = query(ctx, db, `SELECT sku, qty, initial FROM stock`, func(r *sql.Rows) error {
		var sku string
		var qty, initial int64
		if err := r.Scan(&sku, &qty, &initial); err != nil {
			return err
		}
		if initial-qty != ordered[sku] {
			add(DiffStock, "", sku, "%d units left the stock, %d were ordered", initial-qty, ordered[sku])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(diffs, func(i, j int) bool {
		if diffs[i].Kind != diffs[j].Kind {
			return diffs[i].Kind < diffs[j].Kind
		}
		if diffs[i].Order != diffs[j].Order {
			return diffs[i].Order < diffs[j].Order
		}
		return diffs[i].Ref < diffs[j].Ref
	})
	return diffs, nil
}

func query(ctx context.Context, db *sql.DB, q string, row func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	for rows.Next() {
		if err := row(rows); err != nil {
			rows.Close()
			return err
		}
	}
	return errors.Join(rows.Err(), rows.Close())
}

// Compensate repairs what can be repaired from the channel's side: a charge
// whose callback never arrived is applied from the channel's query API, and a
// refund the channel has not seen is sent again. Both go through the same
// idempotent paths as the originals, so running Compensate twice (a replay)
// changes nothing the second time. It returns how many repairs it attempted.
func (s *Shop) Compensate(ctx context.Context, diffs []Difference) (int, error) {
	n := 0
	for _, d := range diffs {
		switch d.Kind {
		case DiffPaymentMissing:
			q, err := s.channel.queryTrade(ctx, d.Ref)
			if err != nil {
				return n, err
			}
			if err := s.applyPayment(ctx, q, true); err != nil {
				return n, fmt.Errorf("compensate %s: %w", d.Ref, err)
			}
			n++
		case DiffRefundMissing:
			var amount int64
			if err := s.db.QueryRowContext(ctx, rebind(s.d, `SELECT amount FROM refunds WHERE refund_no = ?`), d.Ref).Scan(&amount); err != nil {
				return n, err
			}
			if err := s.sendRefund(ctx, d.Order, d.Ref, amount); err != nil {
				return n, fmt.Errorf("compensate %s: %w", d.Ref, err)
			}
			n++
		}
	}
	return n, nil
}
