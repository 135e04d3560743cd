package idemclient

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// Config tunes a Transport. A nil *Config means the defaults; a zero field
// means its default.
type Config struct {
	// Transport sends each attempt. Default http.DefaultTransport.
	Transport http.RoundTripper

	// Header is the request header the key is sent in. Default
	// "Idempotency-Key".
	Header string
	// Spelling is how the key is written: SFString ("k", the default) or
	// Bare (k).
	Spelling Spelling
	// Methods get a key when the request has none: default POST and
	// PATCH. Every other method is keyed only when its context carries a
	// key (WithKey) or the request carries the header already; without a
	// key, it is retried only when it is safe by RFC 9110 (GET, HEAD,
	// OPTIONS, TRACE), and otherwise sent once, untouched.
	Methods []string
	// NewKeyFunc makes the key of a logical request. Default NewKey (128
	// bits from crypto/rand).
	NewKeyFunc func() string

	// MaxAttempts bounds the attempts of one logical request, the first
	// included. Default 5; 1 turns retries off.
	MaxAttempts int
	// MaxElapsed bounds the time from the first attempt to the start of
	// the last one. Default 30s.
	MaxElapsed time.Duration
	// AttemptTimeout bounds each attempt's wait for its response headers
	// (and the few bytes of a problem body the Transport reads to classify
	// an answer); reading the body of the answer returned to the caller is
	// not bounded by it. Default 10s; negative: no bound.
	AttemptTimeout time.Duration
	// BaseDelay and MaxDelay shape the backoff before a retry when the
	// server gave no Retry-After: a wait drawn uniformly from
	// [0, min(MaxDelay, BaseDelay × 2^(n-1))) before retry n ("full
	// jitter"). Defaults 100ms and 5s.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter is the longest Retry-After the Transport waits for;
	// a longer one ends the retries. Default 30s.
	MaxRetryAfter time.Duration

	// MaxBufferedBody is how much of a request body without GetBody the
	// Transport keeps to send it again. A longer body is sent once and the
	// request is not retried (ErrBodyNotReplayable). Requests made with
	// http.NewRequest over a *bytes.Buffer, *bytes.Reader or
	// *strings.Reader have GetBody and are never buffered. Default 1 MiB.
	MaxBufferedBody int64

	// Budget is the retry budget. Default: one per Transport, with
	// DefaultBudgetRatio and DefaultBudgetCapacity. Share one Budget
	// between Transports for a common bound.
	Budget *Budget

	// Observer sees every attempt, decision and wait. Default none.
	Observer Observer
}

// Defaults of Config.
const (
	DefaultHeader          = "Idempotency-Key"
	DefaultMaxAttempts     = 5
	DefaultMaxElapsed      = 30 * time.Second
	DefaultAttemptTimeout  = 10 * time.Second
	DefaultBaseDelay       = 100 * time.Millisecond
	DefaultMaxDelay        = 5 * time.Second
	DefaultMaxRetryAfter   = 30 * time.Second
	DefaultMaxBufferedBody = 1 << 20
)

func (c Config) withDefaults() Config {
	if c.Transport == nil {
		c.Transport = http.DefaultTransport
	}
	if c.Header == "" {
		c.Header = DefaultHeader
	}
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxElapsed == 0 {
		c.MaxElapsed = DefaultMaxElapsed
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = DefaultAttemptTimeout
	}
	if c.BaseDelay == 0 {
		c.BaseDelay = DefaultBaseDelay
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if c.MaxBufferedBody == 0 {
		c.MaxBufferedBody = DefaultMaxBufferedBody
	}
	if c.Budget == nil {
		c.Budget = defaultBudget()
	}
	return c
}

func (c Config) validate() error {
	negative := ""
	for name, v := range map[string]int64{
		"MaxElapsed": int64(c.MaxElapsed), "BaseDelay": int64(c.BaseDelay), "MaxDelay": int64(c.MaxDelay),
		"MaxRetryAfter": int64(c.MaxRetryAfter), "MaxBufferedBody": int64(c.MaxBufferedBody),
	} {
		if v < 0 && (negative == "" || name < negative) { // the first by name, whatever the map's order
			negative = name
		}
	}
	switch {
	case c.MaxAttempts < 1:
		return configError("Config.MaxAttempts", fmt.Sprintf("%d: want at least 1", c.MaxAttempts))
	case negative != "":
		return configError("Config."+negative, "must not be negative")
	case c.Spelling != SFString && c.Spelling != Bare:
		return configError("Config.Spelling", fmt.Sprintf("unknown spelling %d (SFString or Bare)", c.Spelling))
	case !validHeaderName(c.Header):
		return configError("Config.Header", fmt.Sprintf("%q is not a header name", c.Header))
	}
	return nil
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

// Transport is an http.RoundTripper that makes retries harmless and
// bounded: it gives each logical request one idempotency key, sends every
// attempt with that key, retries only what a retry can fix, and spends a
// shared retry budget. The package documentation has the rules.
//
// A Transport is safe for concurrent use; create one per client (its
// budget is per Transport unless Config.Budget is shared).
type Transport struct {
	cfg     Config
	header  string // canonical form of cfg.Header
	methods []string
}

// New returns a Transport with cfg (nil: the defaults).
func New(cfg *Config) (*Transport, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	t := &Transport{cfg: c, header: http.CanonicalHeaderKey(c.Header)}
	for _, m := range c.Methods {
		t.methods = append(t.methods, strings.ToUpper(m))
	}
	return t, nil
}

// Budget returns the Transport's retry budget.
func (t *Transport) Budget() *Budget { return t.cfg.Budget }

// safe reports whether method is safe by RFC 9110 §9.2.1.
func safe(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// request is one logical request, as the loop sends it.
type request struct {
	orig    *http.Request // the caller's; never changed
	header  http.Header   // the caller's, or a copy with the key
	length  int64         // ContentLength
	key     string        // "" when unkeyed
	getBody func() (io.ReadCloser, error)
	first   io.ReadCloser // the first attempt's body
	once    bool          // the body can be sent only once
}

// RoundTrip sends req, and sends it again with the same key while the
// rules allow. It implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	key, hasKey := KeyFromContext(ctx)
	raw := req.Header.Get(t.header)
	var value string // the header value, when made with the key
	switch {
	case raw != "":
		key, hasKey = unspell(raw), true
	case hasKey:
	case slices.Contains(t.methods, method):
		hasKey = true
		if t.cfg.NewKeyFunc != nil {
			key = t.cfg.NewKeyFunc()
		} else if t.cfg.Spelling == SFString {
			value = newQuotedKey()
			key = value[1 : len(value)-1]
		} else {
			key = NewKey()
		}
	}
	if !hasKey && !safe(method) {
		return t.cfg.Transport.RoundTrip(req) // sent once, untouched
	}
	if hasKey && raw == "" {
		if err := checkKey(key, t.cfg.Spelling); err != nil {
			closeBody(req)
			return nil, err
		}
	}
	if hasKey {
		if k, ok := KeyFromContext(ctx); !ok || k != key {
			ctx = WithKey(ctx, key)
		}
	}
	r := &request{key: key, orig: req, header: req.Header, length: req.ContentLength}
	if hasKey && raw == "" {
		h := req.Header.Clone()
		if h == nil {
			h = make(http.Header, 1)
		}
		if value == "" {
			value = spell(key, t.cfg.Spelling)
		}
		h[t.header] = []string{value}
		r.header = h
	}
	if err := t.prepareBody(req, r); err != nil {
		return nil, err
	}
	t.cfg.Budget.earn()
	return t.loop(ctx, r)
}

// CloseIdleConnections closes the idle connections of the wrapped
// transport, if it has any (http.Client.CloseIdleConnections calls it).
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.cfg.Transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// configError is the *idem.ConfigError of package idemclient.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "idemclient", Field: field, Reason: reason}
}
