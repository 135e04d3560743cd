package shop

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Notification is a payment callback, and the channel's answer to a trade
// query: the fields are signed with HMAC-SHA256 under the merchant's secret.
type Notification struct {
	TradeNo string `json:"trade_no"`
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
	Status  string `json:"status"`
	Sign    string `json:"sign"`
}

func (n Notification) payload() string {
	return n.TradeNo + "|" + n.OrderID + "|" + strconv.FormatInt(n.Amount, 10) + "|" + n.Status
}

// sign returns the hex HMAC of the notification's fields.
func sign(secret []byte, n Notification) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(n.payload()))
	return hex.EncodeToString(m.Sum(nil))
}

// verify checks the signature in constant time.
func verify(secret []byte, n Notification) bool {
	want, err := hex.DecodeString(n.Sign)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(n.payload()))
	return hmac.Equal(want, m.Sum(nil))
}

// ChannelConfig shapes the simulated payment channel's bad behaviour.
type ChannelConfig struct {
	Secret []byte // the merchant's signing secret
	// NotifyURL receives the callbacks.
	NotifyURL string
	// Resends is the most extra copies of a callback the channel sends,
	// whatever the shop answered (a channel that "did not see" the success).
	Resends int
	// MaxDelay spreads callbacks (and their resends) over time, so that they
	// arrive out of order across orders and copies.
	MaxDelay time.Duration
	// Drop is the probability that a trade's callbacks are never sent at
	// all; reconciliation must find and repair those.
	Drop float64
	// DropFunc, when set, also loses every callback of the trades it
	// reports true for.
	DropFunc func(Trade) bool
	// Forge, Tamper and Suspicious are probabilities per trade of an extra
	// callback: forged (random signature), tampered (amount changed after
	// signing) or suspicious (correctly signed but with a wrong amount).
	Forge, Tamper, Suspicious float64
}

// Trade is one charge in the channel's ledger.
type Trade struct {
	TradeNo string `json:"trade_no"`
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
	Status  string `json:"status"`
}

// ChannelRefund is one refund in the channel's ledger.
type ChannelRefund struct {
	RefundNo string `json:"refund_no"`
	TradeNo  string `json:"trade_no"`
	OrderID  string `json:"order_id"`
	Amount   int64  `json:"amount"`
}

// Ledger is the channel's statement, what reconciliation compares with.
type Ledger struct {
	Trades  []Trade         `json:"trades"`
	Refunds []ChannelRefund `json:"refunds"`
}

// ChannelStats counts what the channel sent, and the charges it answered
// from an idempotency key it had seen (KeyReplays).
type ChannelStats struct {
	Trades, Callbacks, Resends, Forged, Tampered, Suspicious, Dropped, Queries, KeyReplays int64
}

// Channel is the simulated payment channel: its own HTTP server with a
// ledger, a trade query API and a refund API, that calls the shop back
// with signed notifications, resent, reordered, and mixed with forged,
// tampered and suspicious ones.
type Channel struct {
	cfg    ChannelConfig
	srv    *http.Server
	ln     net.Listener
	client *http.Client

	mu      sync.Mutex
	trades  map[string]*Trade // by trade number
	byKey   map[string]string // idempotency key -> trade number
	refunds map[string]*ChannelRefund
	rnd     *mrand.Rand

	wg      sync.WaitGroup
	stop    chan struct{}
	stopped atomic.Bool
	stats   struct {
		trades, callbacks, resends, forged, tampered, suspicious, dropped, queries, keyReplays atomic.Int64
	}
}

// StartChannel starts the channel on a loopback port.
func StartChannel(cfg ChannelConfig) (*Channel, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &Channel{
		cfg: cfg, ln: ln,
		client:  &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}},
		trades:  map[string]*Trade{},
		byKey:   map[string]string{},
		refunds: map[string]*ChannelRefund{},
		rnd:     mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64())),
		stop:    make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /trades", c.createTrade)
	mux.HandleFunc("GET /trades/{trade}", c.queryTrade)
	mux.HandleFunc("POST /refunds", c.refund)
	mux.HandleFunc("GET /ledger", c.ledger)
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

// URL is the channel's base URL.
func (c *Channel) URL() string { return "http://" + c.ln.Addr().String() }

// SetNotifyURL sets where callbacks go (the shop starts after the channel).
func (c *Channel) SetNotifyURL(u string) { c.mu.Lock(); c.cfg.NotifyURL = u; c.mu.Unlock() }

// Drain waits until every scheduled callback was sent.
func (c *Channel) Drain() { c.wg.Wait() }

// Close stops sending callbacks and shuts the server down.
func (c *Channel) Close() error {
	if c.stopped.CompareAndSwap(false, true) {
		close(c.stop)
	}
	c.wg.Wait()
	c.client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.srv.Shutdown(ctx)
}

// Stats returns the counters.
func (c *Channel) Stats() ChannelStats {
	return ChannelStats{c.stats.trades.Load(), c.stats.callbacks.Load(), c.stats.resends.Load(), c.stats.forged.Load(),
		c.stats.tampered.Load(), c.stats.suspicious.Load(), c.stats.dropped.Load(), c.stats.queries.Load(), c.stats.keyReplays.Load()}
}

// Ledger returns a copy of the channel's ledger, sorted.
func (c *Channel) Ledger() Ledger {
	c.mu.Lock()
	defer c.mu.Unlock()
	var l Ledger
	for _, t := range c.trades {
		l.Trades = append(l.Trades, *t)
	}
	for _, r := range c.refunds {
		l.Refunds = append(l.Refunds, *r)
	}
	sort.Slice(l.Trades, func(i, j int) bool { return l.Trades[i].TradeNo < l.Trades[j].TradeNo })
	sort.Slice(l.Refunds, func(i, j int) bool { return l.Refunds[i].RefundNo < l.Refunds[j].RefundNo })
	return l
}

func randomID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// createTrade charges an order and answers with the trade, signed. It
// deduplicates by the merchant's Idempotency-Key header, as a card
// provider's API does: the same key answers the first charge (and 422 for
// another order or amount), and a charge without a key, or with a new one,
// is a new charge, whatever order it names.
func (c *Channel) createTrade(w http.ResponseWriter, r *http.Request) {
	var req struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.OrderID == "" || req.Amount <= 0 {
		http.Error(w, "bad trade", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	c.mu.Lock()
	if no, ok := c.byKey[key]; ok && key != "" {
		t := *c.trades[no]
		c.mu.Unlock()
		if t.OrderID != req.OrderID || t.Amount != req.Amount {
			http.Error(w, "idempotency key reused for another charge", http.StatusUnprocessableEntity)
			return
		}
		c.stats.keyReplays.Add(1)
		c.answerTrade(w, t)
		return
	}
	t := &Trade{TradeNo: randomID("T"), OrderID: req.OrderID, Amount: req.Amount, Status: "SUCCESS"}
	c.trades[t.TradeNo] = t
	if key != "" {
		c.byKey[key] = t.TradeNo
	}
	plan := c.planLocked(*t)
	c.mu.Unlock()
	c.stats.trades.Add(1)
	for _, p := range plan {
		c.schedule(p)
	}
	c.answerTrade(w, *t)
}

// answerTrade writes t as a signed notification, the form of the query
// API's answer.
func (c *Channel) answerTrade(w http.ResponseWriter, t Trade) {
	n := Notification{TradeNo: t.TradeNo, OrderID: t.OrderID, Amount: t.Amount, Status: t.Status}
	n.Sign = sign(c.cfg.Secret, n)
	writeJSON(w, http.StatusOK, n)
}

type sendPlan struct {
	delay   time.Duration
	n       Notification
	kind    string // genuine, resend, forged, tampered, suspicious
	untilOK bool   // resend until the shop says success
}

// planLocked decides the callbacks of a new trade.
func (c *Channel) planLocked(t Trade) []sendPlan {
	genuine := Notification{TradeNo: t.TradeNo, OrderID: t.OrderID, Amount: t.Amount, Status: t.Status}
	genuine.Sign = sign(c.cfg.Secret, genuine)
	delay := func() time.Duration {
		if c.cfg.MaxDelay <= 0 {
			return 0
		}
		return time.Duration(c.rnd.Int64N(int64(c.cfg.MaxDelay)))
	}
	if c.rnd.Float64() < c.cfg.Drop || c.cfg.DropFunc != nil && c.cfg.DropFunc(t) {
		c.stats.dropped.Add(1)
		return nil
	}
	plan := []sendPlan{{delay: delay(), n: genuine, kind: "genuine", untilOK: true}}
	for i := c.rnd.IntN(c.cfg.Resends + 1); i > 0; i-- {
		plan = append(plan, sendPlan{delay: delay(), n: genuine, kind: "resend"})
	}
	if c.rnd.Float64() < c.cfg.Forge {
		f := Notification{TradeNo: randomID("T"), OrderID: t.OrderID, Amount: t.Amount, Status: "SUCCESS", Sign: hex.EncodeToString([]byte(randomID("")))}
		plan = append(plan, sendPlan{delay: delay(), n: f, kind: "forged"})
	}
	if c.rnd.Float64() < c.cfg.Tamper {
		f := genuine
		f.Amount = 1 // signed for the real amount, sent for another
		plan = append(plan, sendPlan{delay: delay(), n: f, kind: "tampered"})
	}
	if c.rnd.Float64() < c.cfg.Suspicious {
		f := genuine
		f.Amount = t.Amount / 2
		f.Sign = sign(c.cfg.Secret, f)
		// before the genuine one, so it is judged on its own
		plan = append(plan, sendPlan{delay: plan[0].delay / 2, n: f, kind: "suspicious"})
	}
	return plan
}

func (c *Channel) schedule(p sendPlan) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTimer(p.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.stop:
			return
		}
		switch p.kind {
		case "genuine":
			c.stats.callbacks.Add(1)
		case "resend":
			c.stats.resends.Add(1)
		case "forged":
			c.stats.forged.Add(1)
		case "tampered":
			c.stats.tampered.Add(1)
		case "suspicious":
			c.stats.suspicious.Add(1)
		}
		backoff := 20 * time.Millisecond
		for attempt := 0; ; attempt++ {
			ok := c.notify(p.n)
			if ok || !p.untilOK || attempt >= 20 {
				return
			}
			c.stats.resends.Add(1)
			select {
			case <-time.After(backoff):
			case <-c.stop:
				return
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
}

// notify posts one callback and reports whether the shop answered success.
func (c *Channel) notify(n Notification) bool {
	c.mu.Lock()
	url := c.cfg.NotifyURL
	c.mu.Unlock()
	body, _ := json.Marshal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode == http.StatusOK && bytes.Equal(bytes.TrimSpace(b), []byte("success"))
}

// queryTrade is the channel's query API: the signed truth about a trade.
func (c *Channel) queryTrade(w http.ResponseWriter, r *http.Request) {
	c.stats.queries.Add(1)
	c.mu.Lock()
	t, ok := c.trades[r.PathValue("trade")]
	var cp Trade
	if ok {
		cp = *t
	}
	c.mu.Unlock()
	if !ok {
		http.Error(w, "no such trade", http.StatusNotFound)
		return
	}
	c.answerTrade(w, cp)
}

// refund refunds part of a trade, once per refund number, never beyond what
// was paid.
func (c *Channel) refund(w http.ResponseWriter, r *http.Request) {
	var req ChannelRefund
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.RefundNo == "" || req.Amount <= 0 {
		http.Error(w, "bad refund", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.refunds[req.RefundNo]; ok {
		if old.TradeNo != req.TradeNo || old.Amount != req.Amount {
			http.Error(w, "refund number reused", http.StatusUnprocessableEntity)
			return
		}
		writeJSON(w, http.StatusOK, *old)
		return
	}
	t, ok := c.trades[req.TradeNo]
	if !ok {
		http.Error(w, "no such trade", http.StatusNotFound)
		return
	}
	var sum int64
	for _, x := range c.refunds {
		if x.TradeNo == req.TradeNo {
			sum += x.Amount
		}
	}
	if sum+req.Amount > t.Amount {
		http.Error(w, "refund exceeds the trade", http.StatusConflict)
		return
	}
	req.OrderID = t.OrderID
	c.refunds[req.RefundNo] = &req
	writeJSON(w, http.StatusOK, req)
}

func (c *Channel) ledger(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, c.Ledger())
}

// channelClient is the shop's side of the channel's API.
type channelClient struct {
	base   string
	secret []byte
	http   *http.Client
}

var errChannel = errors.New("shop: payment channel")

// request builds a POST of in as JSON, with key as its Idempotency-Key
// unless empty.
func (cc *channelClient) request(ctx context.Context, path, key string, in any) (*http.Request, error) {
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cc.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return req, nil
}

func (cc *channelClient) do(req *http.Request, out any) error {
	resp, err := cc.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", errChannel, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%w: %s %s: %d %s", errChannel, req.Method, req.URL.Path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// createTrade charges the order at the channel with key as its
// Idempotency-Key, and checks the answer's signature.
func (cc *channelClient) createTrade(ctx context.Context, key, orderID string, amount int64) (Notification, error) {
	var n Notification
	req, err := cc.request(ctx, "/trades", key, map[string]any{"order_id": orderID, "amount": amount})
	if err != nil {
		return n, err
	}
	return n, cc.signed(req, &n)
}

// queryTrade asks the channel and checks the answer's signature.
func (cc *channelClient) queryTrade(ctx context.Context, tradeNo string) (Notification, error) {
	var n Notification
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cc.base+"/trades/"+tradeNo, nil)
	if err != nil {
		return n, err
	}
	return n, cc.signed(req, &n)
}

// signed sends req and decodes its answer into n, whose signature it checks.
func (cc *channelClient) signed(req *http.Request, n *Notification) error {
	if err := cc.do(req, n); err != nil {
		return err
	}
	if !verify(cc.secret, *n) {
		return fmt.Errorf("%w: %s %s: the answer has a bad signature", errChannel, req.Method, req.URL.Path)
	}
	return nil
}

func (cc *channelClient) refund(ctx context.Context, r ChannelRefund) error {
	var out ChannelRefund
	req, err := cc.request(ctx, "/refunds", "", r)
	if err != nil {
		return err
	}
	return cc.do(req, &out)
}
