package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/formtoken"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/step"
)

// Prices are the catalogue, in cents.
var Prices = map[string]int64{"apple": 120, "pear": 250, "plum": 90, "fig": 410}

// CustomerHeader carries the caller's identity. In a real shop it comes from
// the session or the API key; the idempotency scope is derived from it, so
// one customer's key can never replay another customer's response.
const CustomerHeader = "X-Customer"

// Order is an order as the API returns it.
type Order struct {
	ID         string `json:"id"`
	RequestID  string `json:"request_id"`
	Customer   string `json:"customer"`
	SKU        string `json:"sku"`
	Qty        int64  `json:"qty"`
	Amount     int64  `json:"amount"`
	Status     string `json:"status"`
	TradeNo    string `json:"trade_no,omitempty"`
	PaidAmount int64  `json:"paid_amount"`
	Refunded   int64  `json:"refunded"`
}

// Counters are the duplicates each layer absorbed and the faults each
// defence refused, since the shop started.
type Counters struct {
	// Layers, from the fastest to the last word.
	Token       atomic.Int64 // form-token replays and refusals (formtoken)
	FastPath    atomic.Int64 // Idempotency-Key replays and in-flight answers (httpidem over tiered)
	UniqueIndex atomic.Int64 // INSERTs that hit a unique index: request_id, trade_no, refund_no
	FSM         atomic.Int64 // state-machine Duplicate outcomes
	FSMIllegal  atomic.Int64 // state-machine refusals (illegal transitions)
	Inbox       atomic.Int64 // inbox Duplicate outcomes (counted by the consumer)
	Resumed     atomic.Int64 // payment retries that resumed after their finished steps (step)

	// Defences that are not deduplication.
	BadSignature atomic.Int64 // forged and tampered callbacks refused
	Queried      atomic.Int64 // suspicious callbacks verified with the channel
	Rejected     atomic.Int64 // suspicious callbacks the channel did not confirm
	CallbackRead atomic.Int64 // callbacks answered by the "payment exists" read
	StaleFence   atomic.Int64 // writes refused because the lock was lost
	LockDown     atomic.Int64 // orders placed without the lock, its service being down
	OutOfStock   atomic.Int64
	OverRefund   atomic.Int64 // refunds refused by the amount check
	Orders       atomic.Int64 // orders created
}

// Config assembles a shop from its backends.
type Config struct {
	DB      *sql.DB
	Dialect Dialect
	// Records keeps the HTTP idempotency records (httpidem, formtoken)
	// and the payment request's recovery points: tiered over a fast store
	// and sqlstore, or a variant's choice. It must implement step.Store.
	Records idem.Store
	// Durable, when set, is the SQL store on DB that decides Records'
	// claims (tiered's durable store): the payment request's local steps
	// save their recovery points with its StepTx, in their own
	// transaction. Without it (Records keeps its claims elsewhere) a local
	// step's point is saved after its commit, and a crash between the two
	// runs the step again, which its conditional writes make harmless.
	Durable *sqlstore.Store
	Tokens  *onetime.Tokens
	Locker  lock.Locker
	// Channel is the payment channel's base URL; Secret its signing key.
	Channel string
	Secret  []byte
	// Outbox is the shop's outbox (package outbox): the PAID transaction
	// enqueues the shipping message in it.
	Outbox *outbox.Outbox
	// Publisher, when set, is the queue Start's in-process relay publishes
	// the outbox's messages to. The storm runs the relay as a child
	// process instead (so that it can be SIGKILLed) and leaves it nil.
	Publisher publisher
	Variant   Variant
	// CallbackDedup is the ShortTTL variant's fast store, used alone.
	CallbackDedup    idem.Store
	CallbackDedupTTL time.Duration
	// PauseFunc, when set, pauses inside the stock critical section, after
	// the lock was acquired and the stock read: a GC pause or a stalled disk.
	PauseFunc func(requestID string) time.Duration
	// FaultFunc, when set, is called at each fault point of a payment
	// request (PayFault): an error fails the request there (503, the
	// claim is released), and a panic with http.ErrAbortHandler drops its
	// connection, as the process's death would. The client's retry with
	// the same key resumes at the first unfinished step.
	FaultFunc func(orderID string, at PayFault) error
	Logger    *slog.Logger
}

// Shop is the order service.
type Shop struct {
	cfg     Config
	d       Dialect
	db      *sql.DB
	machine *fsm.Machine
	channel *channelClient
	steps   step.Store
	handler http.Handler
	C       Counters

	relay     *outbox.Relay
	startOnce sync.Once
}

// New builds the shop; call Start to run an outbox relay in this process.
func New(cfg Config) (*Shop, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Shop{cfg: cfg, d: cfg.Dialect, db: cfg.DB,
		channel: &channelClient{base: cfg.Channel, secret: cfg.Secret, http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}}
	var ok bool
	if s.steps, ok = cfg.Records.(step.Store); !ok {
		return nil, &idem.ConfigError{Package: "shop", Field: "Records", Reason: "does not keep recovery points (step.Store)"}
	}
	var err error
	s.machine, err = fsm.New(cfg.Dialect, "orders", OrderMachine(cfg.Variant), &fsm.Config{
		OnIllegalFunc: func(ctx context.Context, e *fsm.IllegalTransitionError) {
			s.C.FSMIllegal.Add(1)
			cfg.Logger.WarnContext(ctx, "illegal order transition", "order", e.ID, "transition", e.Transition, "state", e.Current)
		},
	})
	if err != nil {
		return nil, err
	}

	place := http.HandlerFunc(s.placeOrder)
	scope := func(r *http.Request) (string, error) {
		c := r.Header.Get(CustomerHeader)
		if c == "" {
			return "", errors.New("no customer identity")
		}
		return "customer:" + c, nil
	}
	var byToken, byKey http.Handler = place, place
	if cfg.Variant != FrontendOnly {
		ft, err := formtoken.New(cfg.Tokens, cfg.Records, &formtoken.Config{ScopeFunc: scope,
			HTTP: &httpidem.Config{Logger: cfg.Logger, Lease: 5 * time.Second}})
		if err != nil {
			return nil, err
		}
		hi, err := httpidem.New(cfg.Records, &httpidem.Config{ScopeFunc: scope, RequireKey: true, JSONFingerprint: true,
			Logger: cfg.Logger, Lease: 5 * time.Second})
		if err != nil {
			return nil, err
		}
		byToken, byKey = countAbsorbed(ft.Handler(place), &s.C.Token), countAbsorbed(hi.Handler(place), &s.C.FastPath)
	}
	// The payment request runs as steps under its key in every variant
	// (they break other rules): the client sends one key per order.
	payKeyed, err := httpidem.New(cfg.Records, &httpidem.Config{ScopeFunc: scope, RequireKey: true,
		Logger: cfg.Logger, Lease: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /form", s.form)
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(formtoken.DefaultHeader) != "" {
			byToken.ServeHTTP(w, r)
			return
		}
		byKey.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	mux.Handle("POST /orders/{id}/pay", countAbsorbed(payKeyed.Handler(http.HandlerFunc(s.startPayment)), &s.C.FastPath))
	mux.HandleFunc("POST /orders/{id}/refunds", s.refund)
	mux.HandleFunc("POST /callbacks/payment", s.callback)
	s.handler = mux
	return s, nil
}

// Handler is the shop's HTTP API.
func (s *Shop) Handler() http.Handler { return s.handler }

// Machine is the order state machine.
func (s *Shop) Machine() *fsm.Machine { return s.machine }

// countAbsorbed counts the answers the idempotency layer gave without
// running the handler: replays and "in flight" refusals.
func countAbsorbed(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.Header().Get(httpidem.ReplayedHeader) == "true" || sw.status == http.StatusConflict && sw.Header().Get("Retry-After") != "" {
			n.Add(1)
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// form issues a one-time form token bound to the customer.
func (s *Shop) form(w http.ResponseWriter, r *http.Request) {
	c := r.Header.Get(CustomerHeader)
	if c == "" || s.cfg.Tokens == nil {
		http.Error(w, "no customer", http.StatusUnauthorized)
		return
	}
	tok, err := s.cfg.Tokens.Issue(r.Context(), "customer:"+c)
	if err != nil {
		http.Error(w, "token store unavailable", http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"form_token": tok})
}

func problem(w http.ResponseWriter, status int, detail string) {
	httpidem.WriteProblem(w, httpidem.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, RetryAfter: retryAfter(status)})
}

func retryAfter(status int) time.Duration {
	if status == http.StatusServiceUnavailable {
		return time.Second
	}
	return 0
}

// placeOrder creates an order once per client request_id and takes its stock
// in the same transaction, inside the SKU's lock.
func (s *Shop) placeOrder(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RequestID string `json:"request_id"`
		SKU       string `json:"sku"`
		Qty       int64  `json:"qty"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.RequestID == "" || req.Qty <= 0 || req.Qty > 100 {
		problem(w, http.StatusBadRequest, "request_id, sku and qty (1-100) are required")
		return
	}
	price, ok := Prices[req.SKU]
	if !ok {
		problem(w, http.StatusBadRequest, "unknown sku")
		return
	}
	o := Order{ID: randomID("o-"), RequestID: req.RequestID, Customer: r.Header.Get(CustomerHeader), SKU: req.SKU,
		Qty: req.Qty, Amount: price * req.Qty, Status: StateCreated}
	ctx := r.Context()

	if s.cfg.Variant == CheckThenAct {
		// Anti-pattern 1: check, then act. Both of two concurrent submits
		// find nothing here; the index that would stop the second is gone.
		if prev, err := s.orderByRequest(ctx, req.RequestID); err == nil {
			writeJSON(w, http.StatusOK, prev)
			return
		}
	}

	lease, err := s.cfg.Locker.Acquire(ctx, "stock:"+req.SKU) // the lockers' WaitTimeout bounds the wait
	if errors.Is(err, lock.ErrNotAcquired) && ctx.Err() == nil {
		// A wait that ran out says "held" also when the lock service was
		// unreachable all along; one more attempt tells the two apart.
		lease, err = s.cfg.Locker.TryAcquire(ctx, "stock:"+req.SKU)
	}
	var (
		lctx  = ctx
		fence lock.Fence
	)
	switch {
	case err == nil:
		defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()
		lctx, fence = lease.Context(), lease.Fence() // lctx is cancelled if the lock is lost
	case errors.Is(err, lock.ErrNotAcquired) || ctx.Err() != nil:
		problem(w, http.StatusServiceUnavailable, "stock busy; retry")
		return
	default:
		// The lock service is down. The lock only saves wasted work; the
		// constraints keep the stock right without it: go on, unfenced.
		s.C.LockDown.Add(1)
	}

	// Availability check, then (maybe) a pause: the window in which a lease
	// can run out under its holder.
	var have int64
	if err := s.db.QueryRowContext(lctx, rebind(s.d, `SELECT qty FROM stock WHERE sku = ?`), req.SKU).Scan(&have); err != nil {
		problem(w, http.StatusServiceUnavailable, "stock unavailable")
		return
	}
	if have < req.Qty {
		s.C.OutOfStock.Add(1)
		problem(w, http.StatusConflict, "out of stock")
		return
	}
	if s.cfg.PauseFunc != nil {
		if d := s.cfg.PauseFunc(req.RequestID); d > 0 {
			if st, ok := lease.(interface{ Stall(time.Duration) }); ok {
				st.Stall(d) // the embedded lock's renewals stop too, as in a real stall
			} else {
				time.Sleep(d)
			}
		}
	}
	if s.cfg.Variant == LockWithoutConstraint {
		// Anti-pattern 2: the lock is trusted. The value read above is
		// written back minus the order, with no fence and no CHECK.
		lctx = ctx
	}

	created, err := s.insertOrder(lctx, o, fence, have)
	switch {
	case err == nil && created:
		s.C.Orders.Add(1)
		writeJSON(w, http.StatusCreated, o)
	case err == nil:
		// The unique index answered: this request_id has an order. Answer
		// with it, as the first submit was answered (duplicates are friendly).
		s.C.UniqueIndex.Add(1)
		prev, err := s.orderByRequest(ctx, req.RequestID)
		if err != nil {
			problem(w, http.StatusServiceUnavailable, "order lookup failed")
			return
		}
		writeJSON(w, http.StatusOK, prev)
	case errors.Is(err, lock.ErrStaleFence) || (fence != 0 && lock.IsLost(context.Cause(lctx))):
		s.C.StaleFence.Add(1)
		problem(w, http.StatusServiceUnavailable, "stock lock lost; retry")
	case isCheckViolation(err):
		s.C.OutOfStock.Add(1)
		problem(w, http.StatusConflict, "out of stock")
	default:
		s.cfg.Logger.WarnContext(ctx, "place order", "err", err)
		problem(w, http.StatusServiceUnavailable, "database unavailable")
	}
}

// insertOrder writes the order and takes its stock in one transaction. It
// reports false (and changes nothing) when the request_id has an order.
func (s *Shop) insertOrder(ctx context.Context, o Order, fence lock.Fence, have int64) (created bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil || !created {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	ins := `INSERT INTO orders (id, request_id, customer, sku, qty, amount, status) VALUES (?, ?, ?, ?, ?, ?, ?)`
	if s.cfg.Variant != CheckThenAct && s.cfg.Variant != FrontendOnly {
		ins += ` ON CONFLICT (request_id) DO NOTHING`
	}
	res, err := tx.ExecContext(ctx, rebind(s.d, ins), o.ID, o.RequestID, o.Customer, o.SKU, o.Qty, o.Amount, o.Status)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	switch {
	case s.cfg.Variant == LockWithoutConstraint:
		_, err = tx.ExecContext(ctx, rebind(s.d, `UPDATE stock SET qty = ? WHERE sku = ?`), have-o.Qty, o.SKU)
	case fence == 0: // no lock: the CHECK (qty >= 0) alone keeps the stock right
		_, err = tx.ExecContext(ctx, rebind(s.d, `UPDATE stock SET qty = qty - ? WHERE sku = ?`), o.Qty, o.SKU)
	default:
		ph := lock.Question
		if s.d == fsm.Postgres {
			ph = lock.Dollar
		}
		ft := lock.FencedTable{Table: "stock", KeyColumn: "sku", Placeholders: ph}
		set := "qty = qty - ?"
		if ph == lock.Dollar {
			set = "qty = qty - $1"
		}
		err = ft.Update(ctx, tx, o.SKU, fence, set, o.Qty)
	}
	if err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	return true, nil
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

const orderCols = `id, request_id, customer, sku, qty, amount, status, COALESCE(trade_no, ''), paid_amount, refunded`

func scanOrder(row interface{ Scan(...any) error }) (Order, error) {
	var o Order
	err := row.Scan(&o.ID, &o.RequestID, &o.Customer, &o.SKU, &o.Qty, &o.Amount, &o.Status, &o.TradeNo, &o.PaidAmount, &o.Refunded)
	return o, err
}

func (s *Shop) orderByRequest(ctx context.Context, requestID string) (Order, error) {
	return scanOrder(s.db.QueryRowContext(ctx, rebind(s.d, `SELECT `+orderCols+` FROM orders WHERE request_id = ? ORDER BY id LIMIT 1`), requestID))
}

func (s *Shop) order(ctx context.Context, id string) (Order, error) {
	return scanOrder(s.db.QueryRowContext(ctx, rebind(s.d, `SELECT `+orderCols+` FROM orders WHERE id = ?`), id))
}

func (s *Shop) getOrder(w http.ResponseWriter, r *http.Request) {
	o, err := s.order(r.Context(), r.PathValue("id"))
	if errors.Is(err, sql.ErrNoRows) {
		problem(w, http.StatusNotFound, "no such order")
		return
	} else if err != nil {
		problem(w, http.StatusServiceUnavailable, "database unavailable")
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func success(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("success"))
}

func fail(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	_, _ = w.Write([]byte("fail"))
}

// callback handles the channel's payment notification: signature, amount
// check (and a query for a suspicious one), unique trade number, PAYING ->
// PAID, and the outbox row, in one transaction; "success" for duplicates.
func (s *Shop) callback(w http.ResponseWriter, r *http.Request) {
	var n Notification
	if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
		fail(w, http.StatusBadRequest)
		return
	}
	if err := s.applyPayment(r.Context(), n, false); err != nil {
		var se statusError
		if errors.As(err, &se) {
			fail(w, se.status)
			return
		}
		s.cfg.Logger.WarnContext(r.Context(), "payment callback", "err", err)
		fail(w, http.StatusServiceUnavailable)
		return
	}
	success(w)
}

type statusError struct {
	status int
	msg    string
}

func (e statusError) Error() string { return e.msg }

// applyPayment applies a payment notification; trusted is set when it comes
// from the channel's query API (reconciliation's compensation).
func (s *Shop) applyPayment(ctx context.Context, n Notification, trusted bool) (err error) {
	if !verify(s.cfg.Secret, n) {
		s.C.BadSignature.Add(1)
		return statusError{http.StatusUnauthorized, "bad signature"}
	}
	o, err := s.order(ctx, n.OrderID)
	if errors.Is(err, sql.ErrNoRows) {
		return statusError{http.StatusNotFound, "no such order"}
	} else if err != nil {
		return err
	}
	if s.cfg.Variant != ShortTTL {
		// Fast path: a payment with this trade number exists.
		var one int
		err := s.db.QueryRowContext(ctx, rebind(s.d, `SELECT 1 FROM payments WHERE trade_no = ?`), n.TradeNo).Scan(&one)
		if err == nil {
			s.C.CallbackRead.Add(1)
			return nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	if !trusted && (n.Amount != o.Amount || n.Status != "SUCCESS") {
		// Signed, but not what the order says: do not trust it, ask.
		s.C.Queried.Add(1)
		q, err := s.channel.queryTrade(ctx, n.TradeNo)
		if err != nil || q.OrderID != o.ID || q.Amount != o.Amount || q.Status != "SUCCESS" {
			s.C.Rejected.Add(1)
			return statusError{http.StatusBadRequest, "callback not confirmed by the channel"}
		}
		n = q
	}

	if s.cfg.Variant == ShortTTL {
		return s.applyPaymentShortTTL(ctx, n)
	}
	err = inTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error { return s.recordPayment(ctx, tx, n) })
	if errors.Is(err, errSecondCharge) {
		return nil // rolled back: reconciliation reports the second charge
	}
	return err
}

// recordPayment records the payment of n, a verified notification, in tx:
// the payment row (unique trade_no: a second copy inserts nothing),
// PAYING -> PAID, and the outbox row that ships the order. The callback
// and the payment request's "record" step both record through it.
func (s *Shop) recordPayment(ctx context.Context, tx *sql.Tx, n Notification) error {
	res, err := tx.ExecContext(ctx, rebind(s.d, `INSERT INTO payments (id, trade_no, order_id, amount) VALUES (?, ?, ?, ?) ON CONFLICT (trade_no) DO NOTHING`),
		randomID("p-"), n.TradeNo, n.OrderID, n.Amount)
	if err != nil {
		return err
	}
	if k, err := res.RowsAffected(); err != nil {
		return err
	} else if k == 0 {
		s.C.UniqueIndex.Add(1)
		return nil
	}
	fr, err := s.machine.Fire(ctx, tx, n.OrderID, "pay", &fsm.Options{Set: map[string]any{"paid_amount": n.Amount}})
	switch {
	case errors.Is(err, fsm.ErrIllegalTransition):
		return statusError{http.StatusConflict, "order not payable"}
	case err != nil:
		return err
	case fr.Outcome == fsm.Duplicate:
		// Paid before under another trade number: a second charge that
		// reconciliation reports. Record nothing here.
		s.C.FSM.Add(1)
		return errSecondCharge
	}
	return s.writeOutbox(ctx, tx, n.OrderID)
}

// errSecondCharge rolls back the payment of a trade that charged an order
// already paid under another trade number.
var errSecondCharge = statusError{http.StatusConflict, "order paid under another trade number"}

// writeOutbox enqueues the shipping message in tx, the PAID transaction:
// it is published if and only if the payment commits. Its ID is derived
// from the order, so it is the consumer's dedup key for every copy the
// relay publishes.
func (s *Shop) writeOutbox(ctx context.Context, tx *sql.Tx, orderID string) error {
	if s.cfg.Outbox == nil {
		return errors.New("shop: no outbox configured")
	}
	payload, _ := json.Marshal(map[string]string{"order_id": orderID})
	return s.cfg.Outbox.Enqueue(ctx, tx, outbox.Message{ID: "paid:" + orderID, Destination: outboxDestination,
		OrderingKey: orderID, Payload: payload})
}

// applyPaymentShortTTL is anti-pattern 4: the fast store decides alone, and
// its TTL is shorter than the channel's resend window.
func (s *Shop) applyPaymentShortTTL(ctx context.Context, n Notification) error {
	key, err := idem.NewKey("callbacks", n.TradeNo)
	if err != nil {
		return err
	}
	c, err := s.cfg.CallbackDedup.Begin(ctx, idem.BeginRequest{Key: key, Lease: s.cfg.CallbackDedupTTL, Retention: s.cfg.CallbackDedupTTL})
	if err != nil {
		return err
	}
	if c.Outcome != idem.Acquired {
		s.C.FastPath.Add(1)
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = ignoreDone(tx.Rollback()) }()
	if _, err := tx.ExecContext(ctx, rebind(s.d, `INSERT INTO payments (id, trade_no, order_id, amount) VALUES (?, ?, ?, ?)`),
		randomID("p-"), n.TradeNo, n.OrderID, n.Amount); err != nil {
		return err
	}
	fr, err := s.machine.Fire(ctx, tx, n.OrderID, "pay", &fsm.Options{Set: map[string]any{"paid_amount": n.Amount}})
	if err != nil && !errors.Is(err, fsm.ErrIllegalTransition) {
		return err
	}
	if err == nil && fr.Outcome == fsm.Applied {
		if err := s.writeOutbox(ctx, tx, n.OrderID); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return s.cfg.CallbackDedup.Complete(ctx, c.Owner, []byte("success"))
}

// refund records a refund once per refund number, and only while refunded +
// amount <= paid: one conditional UPDATE. Then it asks the channel (which
// deduplicates by refund number too).
func (s *Shop) refund(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RefundNo string `json:"refund_no"`
		Amount   int64  `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.RefundNo == "" || req.Amount <= 0 {
		problem(w, http.StatusBadRequest, "refund_no and a positive amount are required")
		return
	}
	status, err := s.Refund(r.Context(), r.PathValue("id"), req.RefundNo, req.Amount)
	if err != nil {
		problem(w, status, err.Error())
		return
	}
	writeJSON(w, status, map[string]any{"refund_no": req.RefundNo, "amount": req.Amount})
}

// Refund applies a refund and returns the HTTP status that describes it.
func (s *Shop) Refund(ctx context.Context, orderID, refundNo string, amount int64) (status int, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = ignoreDone(tx.Rollback())
		}
	}()
	res, err := tx.ExecContext(ctx, rebind(s.d, `INSERT INTO refunds (refund_no, order_id, amount) VALUES (?, ?, ?) ON CONFLICT (refund_no) DO NOTHING`), refundNo, orderID, amount)
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	if k, err := res.RowsAffected(); err != nil {
		return http.StatusServiceUnavailable, err
	} else if k == 0 {
		_ = tx.Rollback()
		var prevOrder string
		var prevAmount int64
		if err := s.db.QueryRowContext(ctx, rebind(s.d, `SELECT order_id, amount FROM refunds WHERE refund_no = ?`), refundNo).Scan(&prevOrder, &prevAmount); err != nil {
			return http.StatusServiceUnavailable, err
		}
		if prevOrder != orderID || prevAmount != amount {
			return http.StatusUnprocessableEntity, errors.New("refund number reused for another refund")
		}
		s.C.UniqueIndex.Add(1)
		return http.StatusOK, s.sendRefund(ctx, orderID, refundNo, amount) // a replay re-sends: the channel deduplicates
	}
	res, err = tx.ExecContext(ctx, rebind(s.d, `UPDATE orders SET refunded = refunded + ? WHERE id = ? AND refunded + ? <= paid_amount AND status IN ('PAID', 'SHIPPED')`), amount, orderID, amount)
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	if k, err := res.RowsAffected(); err != nil {
		return http.StatusServiceUnavailable, err
	} else if k == 0 {
		s.C.OverRefund.Add(1)
		return http.StatusConflict, errors.New("refund exceeds what was paid")
	}
	if err := tx.Commit(); err != nil {
		return http.StatusServiceUnavailable, err
	}
	committed = true
	if err := s.sendRefund(ctx, orderID, refundNo, amount); err != nil {
		return http.StatusAccepted, nil // recorded; reconciliation re-sends it
	}
	return http.StatusCreated, nil
}

func (s *Shop) sendRefund(ctx context.Context, orderID, refundNo string, amount int64) error {
	var tradeNo string
	err := s.db.QueryRowContext(ctx, rebind(s.d, `SELECT trade_no FROM payments WHERE order_id = ? ORDER BY id LIMIT 1`), orderID).Scan(&tradeNo)
	if err != nil {
		return err
	}
	return s.channel.refund(ctx, ChannelRefund{RefundNo: refundNo, TradeNo: tradeNo, Amount: amount})
}

// Start runs an outbox relay (package outbox) in this process, publishing
// to cfg.Publisher, until Stop; without a Publisher or an Outbox it does
// nothing (the relay runs elsewhere).
func (s *Shop) Start() {
	s.startOnce.Do(func() {
		if s.cfg.Publisher == nil || s.cfg.Outbox == nil {
			return
		}
		r, err := s.cfg.Outbox.NewRelay(&queuePublisher{pub: s.cfg.Publisher}, relayConfig())
		if err == nil {
			err = r.Start(context.Background())
		}
		if err != nil {
			s.cfg.Logger.Error("outbox relay", "err", err)
			return
		}
		s.relay = r
	})
}

// Stop stops the relay and closes the channel client's idle connections;
// safe to call twice or before Start.
func (s *Shop) Stop() {
	if s.relay != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.relay.Stop(ctx)
		cancel()
	}
	s.channel.http.CloseIdleConnections()
}

// OutboxPending counts the messages of the outbox the broker has not
// confirmed yet (state outbox.Pending; the shop's publishers never park
// one).
func (s *Shop) OutboxPending(ctx context.Context) (int, error) {
	return outboxPending(ctx, s.db, s.d)
}

func outboxPending(ctx context.Context, db *sql.DB, d Dialect) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, rebind(d, `SELECT COUNT(*) FROM `+outboxTable+` WHERE state = ?`), int(outbox.Pending)).Scan(&n)
	return n, err
}
