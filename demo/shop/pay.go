package shop

import (
	"context"
	"database/sql"
	"errors"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/step"
)

// The payment request's steps, in order.
const (
	stepOrder  = "order"  // local: CREATED -> PAYING
	stepCharge = "charge" // foreign: the channel, keyed by the step's derived key
	stepRecord = "record" // local: the payment, PAYING -> PAID and the outbox row
)

// PayFault is a fault point of the payment request (Config.FaultFunc).
type PayFault int

const (
	// FaultCharged: the channel charged and answered, and the charge's
	// recovery point is not saved yet.
	FaultCharged PayFault = iota + 1
	// FaultBeforeRecord: the charge is saved, the payment not recorded.
	FaultBeforeRecord
)

func (f PayFault) String() string {
	switch f {
	case FaultCharged:
		return "charged"
	case FaultBeforeRecord:
		return "before record"
	}
	return "PayFault(?)"
}

// cashier is the "order" step's result: the order as the payment found it.
type cashier struct {
	Amount  int64  `json:"amount"`
	State   string `json:"state"`
	TradeNo string `json:"trade_no,omitempty"`
}

// startPayment is the payment request (POST /orders/{id}/pay, behind the
// Idempotency-Key middleware): order -> charge -> record, as steps of the
// request's key (package step). A retry after a failure between them
// resumes at the first unfinished step. The RetriedFromTop shop runs the
// same phases without recovery points.
func (s *Shop) startPayment(w http.ResponseWriter, r *http.Request) {
	ctx, id := r.Context(), r.PathValue("id")
	var op *step.Op
	if s.cfg.Variant != RetriedFromTop {
		var err error
		if op, err = step.Load(ctx, s.steps); err != nil {
			s.cfg.Logger.WarnContext(ctx, "load the payment's recovery points", "order", id, "err", err)
			problem(w, http.StatusServiceUnavailable, "recovery points unavailable")
			return
		}
		if op.Done(stepOrder) {
			s.C.Resumed.Add(1)
		}
	}
	state, tradeNo, err := s.pay(ctx, op, id)
	var se statusError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]string{"state": state, "trade_no": tradeNo})
	case errors.As(err, &se):
		problem(w, se.status, se.msg)
	case errors.Is(err, errChannel):
		problem(w, http.StatusBadGateway, "payment channel unavailable")
	default:
		if !errors.Is(err, idem.ErrLeaseLost) && !errors.Is(err, errFault) {
			s.cfg.Logger.WarnContext(ctx, "payment", "order", id, "err", err)
		}
		problem(w, http.StatusServiceUnavailable, "payment interrupted; retry with the same key")
	}
}

// errFault is the failure the storm's FaultFunc injects.
var errFault = errors.New("shop: injected fault")

// pay runs the payment's phases: as steps of op, or (op nil: the
// RetriedFromTop shop) every phase each time it is called. It returns the
// order's state and its trade number.
func (s *Shop) pay(ctx context.Context, op *step.Op, id string) (state, tradeNo string, err error) {
	c, err := local(ctx, s, op, stepOrder, func(ctx context.Context, tx *sql.Tx, key string) (cashier, error) {
		return s.openCashier(ctx, tx, id, key)
	})
	if err != nil || c.State != StatePaying {
		return c.State, c.TradeNo, err // paid already, or shipped
	}
	n, err := foreign(ctx, op, stepCharge, func(ctx context.Context, key string) (Notification, error) {
		n, err := s.charge(ctx, key, id, c.Amount)
		if err == nil {
			err = s.fault(id, FaultCharged)
		}
		return n, err
	})
	if err != nil {
		return "", "", err
	}
	if err := s.fault(id, FaultBeforeRecord); err != nil {
		return "", "", err
	}
	if s.cfg.Variant == ShortTTL {
		// That shop's payments have no unique trade_no: its own path.
		_, err = foreign(ctx, op, stepRecord, func(ctx context.Context, _ string) (bool, error) {
			return true, s.applyPaymentShortTTL(ctx, n)
		})
		return StatePaid, n.TradeNo, err
	}
	_, err = local(ctx, s, op, stepRecord, func(ctx context.Context, tx *sql.Tx, _ string) (bool, error) {
		// The payment row first, then the order, in the order the
		// channel's callback locks them (recordPayment): the other order
		// deadlocked with a concurrent callback on PostgreSQL.
		if err := s.recordPayment(ctx, tx, n); err != nil {
			return false, err
		}
		_, err := tx.ExecContext(ctx, rebind(s.d, `UPDATE orders SET trade_no = ? WHERE id = ? AND trade_no IS NULL`), n.TradeNo, id)
		return err == nil, err
	})
	return StatePaid, n.TradeNo, err
}

// openCashier moves the order from CREATED to PAYING in tx (one
// conditional UPDATE, which writes key, the payment operation's, on the
// order) and returns what the payment needs of it. A Duplicate of a
// cashier that another key opened is refused: that operation charges,
// not this one. Without a key (RetriedFromTop) a Duplicate goes on to
// charge: the handler cannot tell its own earlier attempt from another's.
func (s *Shop) openCashier(ctx context.Context, tx *sql.Tx, id, key string) (cashier, error) {
	var c cashier
	var opener string
	err := tx.QueryRowContext(ctx, rebind(s.d, `SELECT amount, status, COALESCE(trade_no, ''), COALESCE(pay_key, '') FROM orders WHERE id = ?`), id).
		Scan(&c.Amount, &c.State, &c.TradeNo, &opener)
	if errors.Is(err, sql.ErrNoRows) {
		return c, statusError{http.StatusNotFound, "no such order"}
	} else if err != nil {
		return c, err
	}
	var opts *fsm.Options
	if key != "" {
		opts = &fsm.Options{Set: map[string]any{"pay_key": key}}
	}
	res, err := s.machine.Fire(ctx, tx, id, "start_payment", opts)
	if errors.Is(err, fsm.ErrIllegalTransition) {
		return c, statusError{http.StatusConflict, "order cannot be paid: " + c.State}
	} else if err != nil {
		return c, err
	}
	c.State = res.State
	if res.Outcome == fsm.Duplicate {
		s.C.FSM.Add(1)
		if key != "" && c.State == StatePaying && opener != key {
			return c, statusError{http.StatusConflict, "the order's payment is in progress under another key"}
		}
	}
	return c, nil
}

// charge has the channel charge the order, sending key as its
// Idempotency-Key, and checks the signed answer against the order as the
// callback is checked.
func (s *Shop) charge(ctx context.Context, key, id string, amount int64) (Notification, error) {
	n, err := s.channel.createTrade(ctx, key, id, amount)
	if err != nil {
		return n, err
	}
	if n.OrderID != id || n.Amount != amount || n.Status != "SUCCESS" {
		return n, statusError{http.StatusBadGateway, "the channel's answer does not match the order"}
	}
	return n, nil
}

func (s *Shop) fault(id string, at PayFault) error {
	if s.cfg.FaultFunc == nil {
		return nil
	}
	return s.cfg.FaultFunc(id, at)
}

// local runs fn, a phase that writes only to the shop's database, in a
// transaction of its own: as the step name of op, with the step's derived
// key, and its recovery point committed in that transaction (Step.SaveWith
// with Durable's StepTx) when the shop has Durable; without op, with no
// key, every time.
func local[T any](ctx context.Context, s *Shop, op *step.Op, name string, fn func(ctx context.Context, tx *sql.Tx, key string) (T, error)) (T, error) {
	run := func(ctx context.Context, st *step.Step) (v T, err error) {
		err = inTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
			if st == nil {
				v, err = fn(ctx, tx, "")
				return err
			}
			if v, err = fn(ctx, tx, st.Key()); err == nil && s.cfg.Durable != nil {
				err = st.SaveWith(ctx, v, s.cfg.Durable.StepTx(tx))
			}
			return err
		})
		return v, err
	}
	if op == nil {
		return run(ctx, nil)
	}
	return step.Run(ctx, op, name, nil, run)
}

// foreign runs fn, a call to another service, with the idempotency key it
// sends: as the step name of op, with the step's derived key (the same on
// every retry, so the service answers a repeat with its first result);
// without op, with a key made afresh each time, as a handler that makes
// the provider's key itself does.
func foreign[T any](ctx context.Context, op *step.Op, name string, fn func(ctx context.Context, key string) (T, error)) (T, error) {
	if op == nil {
		return fn(ctx, randomID("k-"))
	}
	return step.Run(ctx, op, name, nil, func(ctx context.Context, st *step.Step) (T, error) {
		return fn(ctx, st.Key())
	})
}
