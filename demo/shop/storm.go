package shop

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/onetime/formtoken"
	"github.com/idemkit/idem/outbox"
)

// StormConfig sizes and points a storm.
type StormConfig struct {
	// Orders is the number of orders the clients place (N). Default 400.
	Orders int
	// Clients is the number of concurrent clients. Default 16.
	Clients int
	// Backends are the servers to run on; the zero value is embedded.
	Backends Backends
	// Variant is the shop under test; Disciplined by default.
	Variant Variant
	// Kills is how many times a consumer process is SIGKILLed between its
	// commit and its ack, and as many times the outbox relay process
	// between the broker's confirm and its mark. Default 3; negative: none.
	Kills int
	// ChildCommand returns a command that runs this program as a child,
	// the consumer or the relay (it must call RunChild when IsChild
	// reports true). Required.
	ChildCommand func() *exec.Cmd
	// Progress, when set, receives a progress line every two seconds.
	Progress io.Writer
	// Placed, when set, is incremented as each order has been placed (or
	// refused): RunCompare's progress across its concurrent storms.
	Placed *atomic.Int64
}

// LayerCount is one row of the report.
type LayerCount struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
	What  string `json:"what"`
}

// Violation is a broken invariant.
type Violation struct {
	Kind     string   `json:"kind"`
	Count    int64    `json:"count"`
	Examples []string `json:"examples,omitempty"`
}

// Result is what a storm found.
type Result struct {
	Variant  Variant       `json:"-"`
	Name     string        `json:"variant"`
	Backends string        `json:"backends"`
	Orders   int           `json:"orders"`
	Duration time.Duration `json:"duration_ns"`

	Layers   []LayerCount `json:"layers"`   // duplicates absorbed, per layer
	Defences []LayerCount `json:"defences"` // faults refused by other defences
	Storm    []LayerCount `json:"storm"`    // what the storm threw

	Violations []Violation  `json:"violations"`
	Found      []Difference `json:"found_before_compensation"`
	Remaining  []Difference `json:"remaining"`

	Acked, Refused, OutOfStock int64
	Requests                   int64
	Statements                 int64
	Consumer                   ConsumerStats
	ConsumerError              string `json:",omitempty"` // the last consumer process failure, if any
	Relay                      RelayStats
	RelayError                 string `json:",omitempty"` // the last relay process failure, if any
	Channel                    ChannelStats
}

// OK reports whether no invariant was broken.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Damage is the count of the violation the variant is expected to cause.
func (r *Result) Damage() int64 {
	var n int64
	for _, v := range r.Violations {
		if v.Kind == r.Variant.Damage() {
			n += v.Count
		}
	}
	return n
}

// Stock is what the storm's shop starts with: plenty, so that running out
// is rare and a lost update shows.
func stockFor(orders int) map[string]int64 {
	m := map[string]int64{}
	for sku := range Prices {
		m[sku] = int64(orders) * 20
	}
	return m
}

type client struct {
	base string
	http *http.Client
	reqs atomic.Int64
}

type answer struct {
	problem string // a problem+json body's type and detail
	status  int
	order   Order
	header  http.Header
}

func (c *client) do(ctx context.Context, method, path string, hdr map[string]string, body any, timeout time.Duration) (answer, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c.reqs.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode < 300 {
		_ = json.Unmarshal(b, &a.order)
	} else {
		var p struct{ Type, Detail string }
		_ = json.Unmarshal(b, &p)
		a.problem = p.Type + " " + p.Detail
	}
	return a, nil
}

// retryAfterHeader is a Retry-After header in seconds (the form the shop
// sends), or 0.
func retryAfterHeader(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 60)) * time.Second
}

// stormState is what the clients saw.
type stormState struct {
	mu      sync.Mutex
	acks    map[string]map[string]bool // request_id -> order ids acknowledged
	orders  map[string]Order           // order id -> order
	refused atomic.Int64
	whyMu   sync.Mutex
	why     []string
	oos     atomic.Int64
	placed  atomic.Int64
	thrown  struct {
		doubleClicks, timeouts, lostAnswers, otherClient, cashierTwice, payFaults, abandoned, refundReplays, overRefunds, rogueShips, redisFlush, redisKill atomic.Int64
	}
}

func (s *stormState) refuse(format string, a ...any) {
	s.refused.Add(1)
	s.whyMu.Lock()
	if len(s.why) < 3 {
		s.why = append(s.why, fmt.Sprintf(format, a...))
	}
	s.whyMu.Unlock()
}

func (s *stormState) ack(reqID string, o Order) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acks[reqID] == nil {
		s.acks[reqID] = map[string]bool{}
	}
	s.acks[reqID][o.ID] = true
	s.orders[o.ID] = o
}

// RunStorm builds a shop on cfg.Backends, drives it with the storm, then
// checks the invariants against the database and the channel's ledger.
func RunStorm(ctx context.Context, cfg StormConfig) (*Result, error) {
	if cfg.Orders <= 0 {
		cfg.Orders = 400
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 16
	}
	if cfg.Kills == 0 {
		cfg.Kills = 3
	}
	if cfg.ChildCommand == nil {
		return nil, errors.New("shop: StormConfig.ChildCommand is required")
	}
	start := time.Now()
	st, err := openStack(ctx, cfg.Backends, cfg.Variant, stockFor(cfg.Orders))
	if err != nil {
		return nil, err
	}
	defer st.close()

	secret := []byte(randomID("secret-"))
	ttl := 100 * time.Millisecond
	// Abandoned payments: the client went away after its payment failed
	// past the charge, and the channel lost the charge's callbacks too.
	// Only reconciliation finds these charges.
	var abandoned sync.Map
	ch, err := StartChannel(ChannelConfig{Secret: secret, Resends: 3, MaxDelay: 400 * time.Millisecond,
		Drop: 0.03, Forge: 0.05, Tamper: 0.05, Suspicious: 0.05, DropFunc: func(t Trade) bool {
			_, ok := abandoned.Load(t.OrderID)
			return ok
		}})
	if err != nil {
		return nil, err
	}
	defer ch.Close()

	state := &stormState{acks: map[string]map[string]bool{}, orders: map[string]Order{}}
	var paused sync.Map  // one pause per request: the retry finds a healthy process
	var faulted sync.Map // one fault per order: the retry finds a healthy process
	scfg := Config{DB: st.db, Dialect: st.d, Records: st.records, Tokens: st.tokens, Locker: st.locker,
		Channel: ch.URL(), Secret: secret, Outbox: st.ob, Variant: cfg.Variant,
		PauseFunc: func(reqID string) time.Duration {
			if _, again := paused.LoadOrStore(reqID, true); !again && hashMod(reqID, 10) == 0 {
				return 1500 * time.Millisecond // longer than the lock's TTL
			}
			return 0
		},
		// Two payments in ten fail after the channel charged: one drops
		// its connection before the charge's recovery point (the client
		// never hears; the retry charges again with the same derived
		// key), one fails before the record (the retry resumes there).
		FaultFunc: func(orderID string, at PayFault) error {
			if _, ok := abandoned.Load(orderID); ok && at == FaultBeforeRecord {
				return fmt.Errorf("%w: the payment failed before the record, and its client went away", errFault)
			}
			if at != FaultCharged+PayFault(hashMod(orderID, 10)-3) {
				return nil // FaultCharged at 3, FaultBeforeRecord at 4
			}
			if _, again := faulted.LoadOrStore(orderID, true); again {
				return nil
			}
			state.thrown.payFaults.Add(1)
			if at == FaultCharged {
				panic(http.ErrAbortHandler) // the connection drops, as if the process died
			}
			return fmt.Errorf("%w: the database connection dropped before the record", errFault)
		},
	}
	if st.records == st.tiered {
		scfg.Durable = st.durable // the claims are decided in the shop's database
	}
	if cfg.Variant == ShortTTL {
		if st.rdb != nil {
			scfg.CallbackDedup = st.fast
		} else {
			ms := memstore.New(&memstore.Config{SweepInterval: -1})
			scfg.CallbackDedup = ms
		}
		scfg.CallbackDedupTTL = ttl
	}
	shop, err := New(scfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: shop.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}()
	base := "http://" + ln.Addr().String()
	ch.SetNotifyURL(base + "/callbacks/payment")
	defer shop.Stop()

	kills := cfg.Kills
	if kills < 0 {
		kills = 0
	}
	cons := &consumers{cfg: st.childConfig(cfg.Variant), command: cfg.ChildCommand, kills: kills,
		rnd: mrand.New(mrand.NewPCG(mrand.Uint64(), 1))}
	cons.cfg.LostAck, cons.cfg.FailEvery = 0.05, 10
	cons.start()
	defer cons.stop()
	// The outbox relay, a child process too: package outbox's Relay,
	// SIGKILLed after the broker confirmed a batch and before it marked
	// the batch sent. 1 message in 20 it publishes twice.
	relays := &consumers{cfg: st.childConfig(cfg.Variant), command: cfg.ChildCommand, kills: kills,
		rnd: mrand.New(mrand.NewPCG(mrand.Uint64(), 2))}
	relays.cfg.Role, relays.cfg.DuplicateEvery = roleRelay, 20
	relays.start()
	defer relays.stop()

	cl := &client{base: base, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	defer cl.http.CloseIdleConnections()

	// Progress.
	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	if cfg.Progress != nil {
		progressWG.Add(1)
		go func() {
			defer progressWG.Done()
			t := time.NewTicker(2 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-progressDone:
					return
				case <-t.C:
					cs := cons.stats()
					fmt.Fprintf(cfg.Progress, "  %-24s orders %4d/%d  callbacks %4d  shipped %4d  inbox dups %3d  consumer kills %d  relay kills %d\n",
						cfg.Variant.String(), state.placed.Load(), cfg.Orders, ch.Stats().Callbacks, cs.Processed, cs.Duplicates, cs.Kills, relays.killed.Load())
				}
			}
		}()
	}
	defer func() {
		close(progressDone)
		progressWG.Wait()
	}()

	// Phase 1: orders and payments, with Redis trouble midway.
	jobs := make(chan int)
	var wg sync.WaitGroup
	var unpaid sync.Map
	for w := 0; w < cfg.Clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := mrand.New(mrand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for i := range jobs {
				o, ok := placeOne(ctx, cl, state, cfg.Variant, i, rnd)
				state.placed.Add(1)
				if cfg.Placed != nil {
					cfg.Placed.Add(1)
				}
				if !ok {
					continue
				}
				// One order in twenty is abandoned at the cashier, counted
				// (not drawn) so that every storm has unpaid orders for
				// the rogue shipping requests of phase 2 (a draw of 5%
				// left none in about one storm of 60 orders in twenty, and
				// fsm-jump-path then showed no damage).
				if i%20 == 7 {
					unpaid.Store(o.ID, true)
					continue
				}
				if i%20 == 13 {
					abandoned.Store(o.ID, true)
					state.thrown.abandoned.Add(1)
					_, _ = cl.do(ctx, http.MethodPost, "/orders/"+o.ID+"/pay", map[string]string{CustomerHeader: o.Customer, "Idempotency-Key": "pay-" + o.ID}, nil, 10*time.Second)
					continue
				}
				payOne(ctx, cl, state, o, rnd)
			}
		}(w)
	}
	var (
		restart *time.Timer
		notes   atomic.Value // a failure of the storm's own machinery
	)
	for i := 0; i < cfg.Orders; i++ {
		if st.redis != nil {
			switch i {
			case cfg.Orders * 3 / 10:
				if st.rdb != nil {
					_ = st.rdb.FlushAll(ctx).Err()
					state.thrown.redisFlush.Add(1)
				}
			case cfg.Orders * 6 / 10:
				st.redis.kill()
				state.thrown.redisKill.Add(1)
				restart = time.AfterFunc(3*time.Second, func() { // down for 3 s: longer than a client's retries
					if err := st.redis.start(); err != nil {
						notes.Store(err.Error())
					}
				})
			}
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if restart != nil {
		restart.Stop() // (re)start it here instead, before the stack can close
	}
	if st.redis != nil {
		if err := st.redis.start(); err != nil {
			return nil, err
		}
	}
	if n, ok := notes.Load().(string); ok {
		return nil, fmt.Errorf("shop: restarting the private Redis: %s", n)
	}

	// Phase 2: callbacks drain; rogue shipping requests for unpaid orders.
	ch.Drain()
	waitQuiet(ctx, shop, st, cons)
	rogue, err := unpaidOrders(ctx, st)
	if err != nil {
		return nil, err
	}
	for _, id := range rogue {
		body, _ := json.Marshal(map[string]string{"order_id": id})
		if err := st.pub.Publish(ctx, "rogue:"+id, body); err != nil {
			return nil, err
		}
		state.thrown.rogueShips.Add(1)
	}
	waitQuiet(ctx, shop, st, cons)

	// Phase 3: reconciliation and compensation, replayed.
	found, err := Reconcile(ctx, st.db, ch.Ledger())
	if err != nil {
		return nil, err
	}
	for range 2 {
		_, _ = shop.Compensate(ctx, found)
	}
	waitQuiet(ctx, shop, st, cons)

	// Phase 4: refunds, with replays and over-refunds.
	refundStorm(ctx, cl, state, st)

	// Final reconciliation (and one more compensation replay), then checks.
	mid, err := Reconcile(ctx, st.db, ch.Ledger())
	if err != nil {
		return nil, err
	}
	_, _ = shop.Compensate(ctx, mid)
	waitQuiet(ctx, shop, st, cons)
	remaining, err := Reconcile(ctx, st.db, ch.Ledger())
	if err != nil {
		return nil, err
	}

	cons.stop()
	relays.stop()
	cs, rs := cons.stats(), relays.relayStats()
	if err := st.db.QueryRowContext(ctx, rebind(st.d, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN state = ? THEN 1 ELSE 0 END), 0) FROM `+outboxTable),
		int(outbox.Sent)).Scan(&rs.Messages, &rs.Sent); err != nil {
		return nil, err
	}
	consErr, relayErr := cons.lastError(), relays.lastError()
	res := &Result{Variant: cfg.Variant, Name: cfg.Variant.String(), Backends: cfg.Backends.Describe(), Orders: cfg.Orders,
		Found: append(found, mid...), Remaining: remaining, Refused: state.refused.Load(), OutOfStock: state.oos.Load(),
		Requests: cl.reqs.Load(), Statements: st.stmts.Count(), Consumer: cs, ConsumerError: consErr,
		Relay: rs, RelayError: relayErr, Channel: ch.Stats()}
	state.mu.Lock()
	res.Acked = int64(len(state.acks))
	state.mu.Unlock()
	res.Layers = []LayerCount{
		{"token", shop.C.Token.Load(), "form-token submits answered with the first submit's response (onetime + formtoken)"},
		{"fast path", shop.C.FastPath.Load(), "Idempotency-Key retries replayed or held by the record store (httpidem over tiered)"},
		{"unique index", shop.C.UniqueIndex.Load(), "INSERTs stopped by request_id, trade_no or refund_no"},
		{"state machine", shop.C.FSM.Load() + cs.FSMDuplicates, "transitions that had already happened (fsm Duplicate)"},
		{"inbox", cs.Duplicates, "redeliveries skipped by the dedup row in the handler's transaction"},
		{"recovery points", shop.C.Resumed.Load(), "payment retries that resumed after their finished steps (step)"},
	}
	res.Defences = []LayerCount{
		{"signature", shop.C.BadSignature.Load(), "forged and tampered callbacks refused (HMAC)"},
		{"channel query", shop.C.Queried.Load(), "suspicious callbacks checked with the channel"},
		{"payment read", shop.C.CallbackRead.Load(), "callbacks answered by the existing payment (read, no write)"},
		{"channel key", res.Channel.KeyReplays, "charges the channel answered from the step's derived key (no second charge)"},
		{"fence / lease", shop.C.StaleFence.Load(), "stock writes refused after the lock was lost"},
		{"lock down", shop.C.LockDown.Load(), "orders placed without the lock while its service was down (constraints only)"},
		{"amount check", shop.C.OverRefund.Load(), "refunds refused: refunded + amount > paid"},
		{"illegal transition", shop.C.FSMIllegal.Load() + cs.Illegal, "state-machine refusals (alerted)"},
	}
	res.Storm = []LayerCount{
		{"double clicks", state.thrown.doubleClicks.Load(), "two concurrent submits of one form"},
		{"timeouts + retries", state.thrown.timeouts.Load(), "client gave up and retried with the same key"},
		{"answers lost", state.thrown.lostAnswers.Load(), "the client sent the request again after it was answered"},
		{"second client", state.thrown.otherClient.Load(), "same request_id from another device"},
		{"cashier twice", state.thrown.cashierTwice.Load(), "start payment twice at once"},
		{"payment faults", state.thrown.payFaults.Load(), "payment requests failed after the charge, retried with the same key"},
		{"callback resends", res.Channel.Resends, "copies of callbacks, out of order"},
		{"forged/tampered/suspicious", res.Channel.Forged + res.Channel.Tampered + res.Channel.Suspicious, "bad callbacks"},
		{"abandoned payments", state.thrown.abandoned.Load(), "payments failed before the record whose client went away (reconciliation repairs them)"},
		{"dropped callbacks", res.Channel.Dropped, "charges whose callback never came (all those of abandoned payments)"},
		{"lost acks", cs.LostAcks, "consumer acks lost after the commit (redelivered)"},
		{"handler failures", cs.Failed, "shipping handler failed; rolled back and redelivered"},
		{"consumer SIGKILLs", cs.Kills, "consumer killed between commit and ack"},
		{"relay SIGKILLs", rs.Kills, "outbox relay killed after the broker's confirm, before the mark (republished)"},
		{"rogue ship requests", state.thrown.rogueShips.Load(), "shipping requests for unpaid orders"},
		{"refund replays", state.thrown.refundReplays.Load(), "the same refund sent again"},
		{"over-refunds", state.thrown.overRefunds.Load(), "refunds beyond the paid amount"},
		{"Redis flushes", state.thrown.redisFlush.Load(), "FLUSHALL on the private Redis"},
		{"Redis kills", state.thrown.redisKill.Load(), "SIGKILL of the private Redis, restarted empty"},
	}
	res.Violations, err = checkInvariants(ctx, st, state, remaining, ch.Ledger())
	if err != nil {
		return nil, err
	}
	res.Duration = time.Since(start)
	return res, nil
}

// placeOne places order i the way a real client would, with the storm's
// duplicates, and returns the acknowledged order.
func placeOne(ctx context.Context, cl *client, s *stormState, v Variant, i int, rnd *mrand.Rand) (Order, bool) {
	customer := fmt.Sprintf("c-%d", i%50)
	reqID := randomID("r-")
	skus := []string{"apple", "pear", "plum", "fig"}
	body := map[string]any{"request_id": reqID, "sku": skus[rnd.IntN(len(skus))], "qty": 1 + rnd.IntN(3)}
	browser := rnd.Float64() < 0.6
	hdr := map[string]string{CustomerHeader: customer}

	var submit func(timeout time.Duration) (answer, error)
	if browser {
		tok := formToken(ctx, cl, hdr) // the page the user submits from
		if tok == "" {
			s.refuse("no form token")
			return Order{}, false
		}
		h := map[string]string{CustomerHeader: customer, formtoken.DefaultHeader: tok}
		submit = func(timeout time.Duration) (answer, error) {
			return cl.do(ctx, http.MethodPost, "/orders", h, body, timeout)
		}
	} else {
		h := map[string]string{CustomerHeader: customer, "Idempotency-Key": reqID}
		submit = func(timeout time.Duration) (answer, error) {
			return cl.do(ctx, http.MethodPost, "/orders", h, body, timeout)
		}
	}

	// Another client (the app, a second tab) sends the same request_id at
	// the same moment, with its own key: only the unique index recognises it.
	var otherWG sync.WaitGroup
	if rnd.Float64() < 0.15 {
		s.thrown.otherClient.Add(1)
		otherWG.Add(1)
		go func() {
			defer otherWG.Done()
			h := map[string]string{CustomerHeader: customer, "Idempotency-Key": "other-" + reqID}
			for attempt := 0; attempt < 10; attempt++ {
				a, err := cl.do(ctx, http.MethodPost, "/orders", h, body, 10*time.Second)
				if err == nil {
					if _, ok := settle(s, reqID, []answer{a}); ok || a.status < 500 {
						return
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}

	// First attempt: a double click (the browser's button is disabled in
	// the front-end-only shop, so there it does not happen), or a client that
	// times out quickly and retries.
	var first []answer
	if browser && v != FrontendOnly && rnd.Float64() < 0.3 {
		s.thrown.doubleClicks.Add(1)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if a, err := submit(10 * time.Second); err == nil {
					mu.Lock()
					first = append(first, a)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	} else {
		timeout := 10 * time.Second
		if rnd.Float64() < 0.2 {
			timeout = 30 * time.Millisecond
			s.thrown.timeouts.Add(1)
		}
		if a, err := submit(timeout); err == nil {
			first = append(first, a)
		}
	}
	o, ok := settle(s, reqID, first)
	last := "no answer"
	// Retry: a dozen times, for as long as the key is in flight up to two
	// leases (a claim whose holder vanished frees up after one), and for
	// as long as the shop answers "come back later" (a 503 with
	// Retry-After: its stock lock was lost, its database did not answer)
	// up to a minute, as a client with a payment to make is patient. On a
	// busy machine (load 30, the race detector) a renewal of the 1 s stock
	// lock can come late several times in a row, and a dozen retries a
	// second apart then ended with an order the shop had only postponed,
	// counted as refused.
	start := time.Now()
	inFlight, later := false, false
	for attempt := 0; !ok && (attempt < 12 || inFlight && time.Since(start) < 12*time.Second || later && time.Since(start) < time.Minute); attempt++ {
		var a answer
		a, err := submit(10 * time.Second)
		inFlight = err == nil && a.status == http.StatusConflict && a.header.Get("Retry-After") != ""
		later = err == nil && a.status == http.StatusServiceUnavailable && a.header.Get("Retry-After") != ""
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("status %d %s", a.status, a.header.Get("Content-Type"))
			if p := a.problem; p != "" {
				last += " " + p
			}
			if o, ok = settle(s, reqID, []answer{a}); ok {
				break
			}
			if a.status == http.StatusConflict && a.header.Get("Retry-After") == "" {
				otherWG.Wait()
				s.oos.Add(1) // out of stock: a business answer, not a refusal
				return Order{}, false
			}
			if a.status >= 400 && a.status < 500 && a.status != http.StatusConflict {
				otherWG.Wait()
				s.refuse("request %s: status %d", reqID, a.status)
				return Order{}, false
			}
		}
		pause := time.Duration(min(20<<attempt, 250)) * time.Millisecond
		if err == nil && a.status == http.StatusServiceUnavailable {
			// The shop says when to come back (a lost stock lock, a
			// database that did not answer): a client that retries sooner
			// spends its retries inside the same trouble, which on a busy
			// machine lasts seconds.
			pause = max(pause, retryAfterHeader(a.header))
		}
		time.Sleep(pause)
	}
	if !ok {
		otherWG.Wait()
		s.refuse("request %s: no success after every retry; last: %s", reqID, last)
		return Order{}, false
	}

	// The answer was lost on the way back (the client timed out just as it
	// arrived): the client sends the same request again, same key or token.
	if rnd.Float64() < 0.2 {
		s.thrown.lostAnswers.Add(1)
		if a, err := submit(10 * time.Second); err == nil {
			settle(s, reqID, []answer{a})
		}
	}
	otherWG.Wait()
	return o, true
}

// settle records the acknowledged answers and returns one of them.
func settle(s *stormState, reqID string, as []answer) (Order, bool) {
	var o Order
	ok := false
	for _, a := range as {
		if a.status == http.StatusOK || a.status == http.StatusCreated {
			if a.order.ID == "" {
				continue
			}
			s.ack(reqID, a.order)
			o, ok = a.order, true
		}
	}
	return o, ok
}

// formToken fetches a form token (the page the user submits from).
func formToken(ctx context.Context, cl *client, hdr map[string]string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.base+"/form", nil)
	if err != nil {
		return ""
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	cl.reqs.Add(1)
	resp, err := cl.http.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var f struct {
		FormToken string `json:"form_token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&f)
	return f.FormToken
}

// payOne opens the cashier with a key of the order's, sometimes twice at
// once: the second time from another device, with a key of its own.
func payOne(ctx context.Context, cl *client, s *stormState, o Order, rnd *mrand.Rand) {
	hdr := map[string]string{CustomerHeader: o.Customer, "Idempotency-Key": "pay-" + o.ID}
	n := 1
	if rnd.Float64() < 0.3 {
		n = 2
		s.thrown.cashierTwice.Add(1)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hdr
			if i == 1 { // the other device, with its own key
				h = map[string]string{CustomerHeader: o.Customer, "Idempotency-Key": "pay-" + o.ID + "-other"}
			}
			for attempt := 0; attempt < 10; attempt++ {
				a, err := cl.do(ctx, http.MethodPost, "/orders/"+o.ID+"/pay", h, nil, 10*time.Second)
				if err == nil && a.status < 500 {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// refundStorm refunds a quarter of the paid orders, sends every refund twice
// at once and once more later, and tries to refund some orders beyond what
// was paid.
func refundStorm(ctx context.Context, cl *client, s *stormState, st *stack) {
	rows, err := st.db.QueryContext(ctx, `SELECT id, customer, paid_amount FROM orders WHERE status IN ('PAID', 'SHIPPED') ORDER BY id`)
	if err != nil {
		return
	}
	type paid struct {
		id, customer string
		amount       int64
	}
	var ps []paid
	for rows.Next() {
		var p paid
		if rows.Scan(&p.id, &p.customer, &p.amount) == nil {
			ps = append(ps, p)
		}
	}
	rows.Close()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, p := range ps {
		if i%4 != 0 || p.amount < 2 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(i int, p paid) {
			defer func() { <-sem; wg.Done() }()
			hdr := map[string]string{CustomerHeader: p.customer}
			no := randomID("rf-")
			body := map[string]any{"refund_no": no, "amount": p.amount / 2}
			var inner sync.WaitGroup
			for range 2 {
				inner.Add(1)
				go func() {
					defer inner.Done()
					_, _ = cl.do(ctx, http.MethodPost, "/orders/"+p.id+"/refunds", hdr, body, 10*time.Second)
				}()
			}
			inner.Wait()
			s.thrown.refundReplays.Add(2)
			_, _ = cl.do(ctx, http.MethodPost, "/orders/"+p.id+"/refunds", hdr, body, 10*time.Second)
			if i%8 == 0 {
				s.thrown.overRefunds.Add(1)
				over := map[string]any{"refund_no": randomID("rf-"), "amount": p.amount}
				_, _ = cl.do(ctx, http.MethodPost, "/orders/"+p.id+"/refunds", hdr, over, 10*time.Second)
			}
		}(i, p)
	}
	wg.Wait()
}

func unpaidOrders(ctx context.Context, st *stack) ([]string, error) {
	var ids []string
	err := query(ctx, st.db, `SELECT id FROM orders WHERE status IN ('CREATED', 'PAYING') ORDER BY id`, func(r *sql.Rows) error {
		var id string
		if err := r.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	})
	return ids, err
}

// waitQuiet waits until the outbox is published, the queue is empty (the
// in-process one tells; brokers are judged by the consumer going quiet) and
// the consumers reported nothing new for a while.
func waitQuiet(ctx context.Context, shop *Shop, st *stack, cons *consumers) {
	deadline := time.Now().Add(60 * time.Second)
	last, since := int64(-1), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		lines := cons.lines.Load()
		if lines != last {
			last, since = lines, time.Now()
		}
		pending, _ := shop.OutboxPending(ctx)
		queued, err := st.backlog(ctx)
		quiet := time.Since(since)
		if err == nil && pending == 0 && queued == 0 && cons.ready.Load() &&
			quiet > 300*time.Millisecond && (st.mem != nil || quiet > 2500*time.Millisecond) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkInvariants checks the storm's promises against the database, the
// channel's ledger and what the clients were told.
func checkInvariants(ctx context.Context, st *stack, s *stormState, remaining []Difference, l Ledger) ([]Violation, error) {
	viol := map[string]*Violation{}
	add := func(kind, example string) {
		v := viol[kind]
		if v == nil {
			v = &Violation{Kind: kind}
			viol[kind] = v
		}
		v.Count++
		if len(v.Examples) < 3 {
			v.Examples = append(v.Examples, example)
		}
	}
	// No acknowledged order lost; one order per request, whoever asked.
	s.mu.Lock()
	for req, ids := range s.acks {
		if len(ids) > 1 {
			add("acks disagree", fmt.Sprintf("request %s acknowledged as %d different orders", req, len(ids)))
		}
		for id := range ids {
			var n int
			if err := st.db.QueryRowContext(ctx, rebind(st.d, `SELECT COUNT(*) FROM orders WHERE id = ?`), id).Scan(&n); err != nil {
				s.mu.Unlock()
				return nil, err
			}
			if n == 0 {
				add("acknowledged orders lost", "order "+id)
			}
		}
	}
	s.mu.Unlock()
	if n := s.refused.Load(); n > 0 {
		s.whyMu.Lock()
		viol["orders refused"] = &Violation{Kind: "orders refused", Count: n, Examples: append([]string(nil), s.why...)}
		s.whyMu.Unlock()
	}
	// Charged exactly once (reconciliation compares the channel's ledger).
	for _, d := range remaining {
		switch d.Kind {
		case DiffChargeDuplicate:
			add("orders charged twice", d.String())
		case DiffOrderDuplicate:
			add("duplicate orders", d.String())
		case DiffPaymentDuplicate:
			add("duplicate payments", d.String())
		case DiffShipmentDuplicate:
			add("duplicate shipments", d.String())
		case DiffShipmentUnpaid:
			add("unpaid orders shipped", d.String())
		case DiffOverRefund:
			add("refunds over the paid amount", d.String())
		case DiffStock:
			// Count the units, not the SKUs: the damage is in units.
			var left, ordered int64
			_, _ = fmt.Sscanf(d.Detail, "%d units left the stock, %d were ordered", &left, &ordered)
			v := viol["stock units lost"]
			if v == nil {
				v = &Violation{Kind: "stock units lost"}
				viol["stock units lost"] = v
			}
			v.Count += abs(ordered - left)
			if len(v.Examples) < 3 {
				v.Examples = append(v.Examples, d.String())
			}
		default:
			add("reconciliation differences", d.String())
		}
	}
	// Channel side: no refund beyond a trade.
	tradeAmt := map[string]int64{}
	for _, t := range l.Trades {
		tradeAmt[t.TradeNo] = t.Amount
	}
	refunded := map[string]int64{}
	for _, r := range l.Refunds {
		refunded[r.TradeNo] += r.Amount
	}
	for t, n := range refunded {
		if n > tradeAmt[t] {
			add("refunds over the paid amount", "channel trade "+t)
		}
	}
	// No message lost: every paid order shipped.
	err := query(ctx, st.db, `SELECT id FROM orders WHERE status = 'PAID'`, func(r *sql.Rows) error {
		var id string
		if err := r.Scan(&id); err != nil {
			return err
		}
		add("shipments lost", "order "+id+" paid, never shipped")
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Violation
	for _, v := range viol {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out, nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
