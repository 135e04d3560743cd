package formtoken

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/onetime"
)

// DefaultHeader carries the token.
const DefaultHeader = "Form-Token"

// DefaultWaitTimeout is how long a duplicate submit waits for the first
// one's response by default.
const DefaultWaitTimeout = 30 * time.Second

// ScopePrefix is prepended to the scope of the idempotency records this
// middleware keeps, so that a token's record can never collide with an
// Idempotency-Key record of httpidem in the same store.
const ScopePrefix = "onetime\x00"

// Problem type URIs of the refusals this package adds to httpidem's. They
// are documented with httpidem's, in httpidem/problems.md.
const (
	problemBase        = "https://github.com/idemkit/idem/blob/main/httpidem/problems.md#"
	ProblemUnknown     = problemBase + "unknown-token"
	ProblemWrongScope  = problemBase + "wrong-scope"
	ProblemUsed        = problemBase + "token-used"
	ProblemExpired     = problemBase + "token-expired"
	ProblemScope       = problemBase + "scope-rejected"
	ProblemUnavailable = problemBase + "token-store-unavailable"
)

// Config tunes the middleware.
type Config struct {
	// ScopeFunc returns the scope tokens are bound to: the session, the
	// signed-in user, or a form id derived from them — what the server
	// knows, never only what the client sends. It must return the scope
	// the token was issued to. Required. An error answers 403.
	ScopeFunc func(r *http.Request) (string, error)
	// Header carries the token. Default "Form-Token".
	Header string
	// Methods are the protected methods: a request with one of them needs
	// a valid token. Default POST, PUT, PATCH and DELETE.
	Methods []string
	// WaitTimeout is how long a duplicate submit that finds the first one
	// still running waits for its response (and then gets it), instead of
	// answering 409. Default 30s; negative answers 409 at once.
	WaitTimeout time.Duration
	// HTTP tunes the idempotency middleware underneath (lease, retention,
	// body and response limits, which statuses are stored, metrics,
	// logger). Its Header, Methods, RequireKey, ScopeFunc and WaitTimeout
	// are set by this package. Its Retention must be at least the tokens'
	// TTL plus a minute. Nil means httpidem's defaults.
	HTTP *httpidem.Config
	// Logger receives token decisions that concern operators (a token
	// that could not be restored). Default: HTTP.Logger, else
	// slog.Default().
	Logger *slog.Logger
}

// Middleware requires a one-time token on protected requests and answers a
// repeated submit with the first one's response. Build it with New.
type Middleware struct {
	tokens  *onetime.Tokens
	cfg     Config
	methods map[string]bool
	stored  func(status int) bool
	idem    *httpidem.Middleware
	log     *slog.Logger
}

// New returns the middleware: tokens decides which submits may run, records
// keeps their responses for repeats (any idem.Store: sqlstore, redisstore,
// tiered, memstore).
func New(tokens *onetime.Tokens, records idem.Store, cfg *Config) (*Middleware, error) {
	if tokens == nil {
		return nil, configError("tokens", "nil *onetime.Tokens")
	}
	if records == nil {
		return nil, configError("records", "nil idem.Store")
	}
	if cfg == nil || cfg.ScopeFunc == nil {
		return nil, configError("Config.ScopeFunc", "required: tokens are bound to a scope")
	}
	c := *cfg
	if c.Header == "" {
		c.Header = DefaultHeader
	}
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	}
	switch {
	case c.WaitTimeout == 0:
		c.WaitTimeout = DefaultWaitTimeout
	case c.WaitTimeout < 0:
		c.WaitTimeout = 0
	}
	var hc httpidem.Config
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	retention := hc.Retention
	if retention == 0 {
		retention = idem.DefaultRetention
	}
	if retention < tokens.TTL()+time.Minute {
		return nil, configError("Config.HTTP.Retention", fmt.Sprintf(
			"%v is shorter than the tokens' TTL %v plus a minute: a repeat submit after the record expired must find the token expired", retention, tokens.TTL()))
	}
	if hc.StoreStatusFunc == nil {
		hc.StoreStatusFunc = httpidem.DefaultStoreStatus
	}
	m := &Middleware{tokens: tokens, cfg: c, methods: map[string]bool{}, stored: hc.StoreStatusFunc}
	for _, meth := range c.Methods {
		m.methods[strings.ToUpper(meth)] = true
	}
	hc.Header = c.Header
	hc.Methods = c.Methods
	hc.RequireKey = true
	hc.WaitTimeout = c.WaitTimeout
	hc.ScopeFunc = func(r *http.Request) (string, error) {
		scope, ok := r.Context().Value(scopeKey{}).(string)
		if !ok {
			return "", errors.New("formtoken: request did not pass through the formtoken middleware")
		}
		return ScopePrefix + scope, nil
	}
	var err error
	if m.idem, err = httpidem.New(records, &hc); err != nil {
		return nil, err
	}
	m.log = c.Logger
	if m.log == nil {
		m.log = hc.Logger
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	return m, nil
}

type scopeKey struct{}

// Handler wraps next: every protected request must carry a valid token.
//
// The order of events for a protected request:
//
//  1. The scope is computed (ScopeFunc); the token's idempotency record,
//     keyed by (scope, token), is claimed through httpidem. A repeat of a
//     completed submit gets the stored response (Idempotent-Replayed:
//     true) and consumes nothing; a repeat while the first still runs
//     waits for its response (WaitTimeout).
//  2. The claimant spends the token with Tokens.Take, as the record's
//     owner (onetime.UseFor). An unknown, foreign, used or expired token is
//     refused (403, or 409 for used) and next does not run.
//  3. next runs. If its response is one httpidem does not store (5xx, 408,
//     425, 429 by default) or it panics, the token is restored before the
//     claim is released, so the user can submit again with the same token.
//     If the restore fails, the retry still works: the record's next owner
//     re-takes the token (same Use ID, higher fence).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	inner := m.idem.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.spend(w, r, next)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.methods[r.Method] {
			next.ServeHTTP(w, r)
			return
		}
		scope, err := m.cfg.ScopeFunc(r)
		if err == nil && scope == "" {
			err = errors.New("empty scope")
		}
		if err != nil {
			writeProblem(w, http.StatusForbidden, ProblemScope, "Request scope rejected", 0)
			return
		}
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), scopeKey{}, scope)))
	})
}

// spend runs as the claim's owner, inside httpidem.
func (m *Middleware) spend(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	scope, _ := ctx.Value(scopeKey{}).(string)
	owner, ok := idem.OwnerFromContext(ctx)
	token, err := httpidem.ParseKey(r.Header.Get(m.cfg.Header))
	if !ok || err != nil { // httpidem checked both; never happens
		writeProblem(w, http.StatusInternalServerError, ProblemUnavailable, "Token middleware misconfigured", 0)
		return
	}
	receipt, err := m.tokens.Take(ctx, scope, token, onetime.UseFor(owner))
	if err != nil {
		m.refuse(w, err)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	finish := context.WithoutCancel(ctx)
	returned := false
	defer func() {
		if returned {
			return
		}
		// next panicked (or called runtime.Goexit): httpidem releases
		// the claim, so give the token back first.
		p := recover()
		m.restore(finish, receipt)
		if p != nil {
			panic(p)
		}
	}()
	next.ServeHTTP(sw, r)
	returned = true
	if !m.stored(sw.statusOr200()) {
		m.restore(finish, receipt)
	}
}

func (m *Middleware) restore(ctx context.Context, receipt onetime.Receipt) {
	if err := m.tokens.Restore(ctx, receipt); err != nil && !errors.Is(err, onetime.ErrNotHeld) {
		m.log.LogAttrs(ctx, slog.LevelWarn, "one-time token not restored after a failed submit; the retry re-takes it through its idempotency record",
			slog.String("error", err.Error()))
	}
}

// refuse answers a token that may not be spent. The answer is a 4xx that
// httpidem stores like any other: repeating the same token replays it.
func (m *Middleware) refuse(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, onetime.ErrUnknown):
		writeProblem(w, http.StatusForbidden, ProblemUnknown, "Unknown form token", 0)
	case errors.Is(err, onetime.ErrWrongScope):
		writeProblem(w, http.StatusForbidden, ProblemWrongScope, "Form token issued to another session", 0)
	case errors.Is(err, onetime.ErrExpired):
		writeProblem(w, http.StatusForbidden, ProblemExpired, "Form token expired; reload the form", 0)
	case errors.Is(err, onetime.ErrUsed):
		writeProblem(w, http.StatusConflict, ProblemUsed, "Form token already used", 0)
	default:
		// Not stored by httpidem (5xx): the claim is released and the
		// same token can be submitted again.
		writeProblem(w, http.StatusServiceUnavailable, ProblemUnavailable, "Token store unavailable", time.Second)
	}
}

func writeProblem(w http.ResponseWriter, status int, typ, title string, retryAfter time.Duration) {
	httpidem.WriteProblem(w, httpidem.Problem{Type: typ, Title: title, Status: status, RetryAfter: retryAfter})
}

// statusWriter notes the status the handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) statusOr200() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// Flush passes through, so streaming handlers keep working.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// configError is the *idem.ConfigError of package formtoken.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "formtoken", Field: field, Reason: reason}
}
