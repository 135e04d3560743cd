package connectidem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/keyheader"
	"github.com/idemkit/idem/internal/rpcidem"
	"github.com/idemkit/idem/internal/scopehash"
	"github.com/idemkit/idem/observe"
)

// Header names.
const (
	// DefaultHeader carries the key: the same header as for plain HTTP.
	DefaultHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on every replayed answer and on no first one.
	ReplayedHeader = "Idempotent-Replayed"
)

// Config tunes the interceptor. A nil *Config means the defaults.
type Config struct {
	// Header names the request header that carries the key, as an sf-string
	// or a bare token (as httpidem.ParseKey reads it). Default Idempotency-Key.
	Header string
	// KeyFunc, when set, reads the key from the request message (AIP-155's
	// request_id); false means the request carries none and the header is
	// consulted.
	KeyFunc func(ctx context.Context, procedure string, req any) (string, bool)
	// RequireKey answers InvalidArgument to a call without a key.
	RequireKey bool
	// ProcedureFunc selects the protected procedures. Default: every unary one.
	ProcedureFunc func(procedure string) bool
	// ScopeFunc returns what the server knows about the caller. Default
	// HeaderScope("Authorization"), whose scheme comparison ignores case
	// and white space. Empty is anonymous.
	ScopeFunc func(ctx context.Context, req connect.AnyRequest) (string, error)
	// AnonymousShared lets keyed calls without a caller identity share one
	// keyspace; off by default, such calls are refused.
	AnonymousShared bool
	// StoreCodeFunc decides which codes are stored (Ok included); default
	// DefaultStoreCode.
	StoreCodeFunc func(connect.Code) bool
	// Lease and Retention are passed to Store.Begin (zero: the defaults).
	Lease, Retention time.Duration
	// MaxResponse bounds a stored answer; a larger one is delivered once and
	// its retries get FailedPrecondition. Default 4 MiB.
	MaxResponse int
	// InFlightRetryAfter caps the RetryInfo delay of an in-flight answer.
	// Default one second.
	InFlightRetryAfter time.Duration
	// Logger gets store failures, with the hashed key only. Default
	// slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told of each decision, store call and phase,
	// as httpidem's is: a hook (observe.ObserverFunc), promidem or
	// otelidem. Events carry the procedure as Method and the answer's code
	// as Status. Nil observes nothing.
	Observer observe.Observer
}

// DefaultStoreCode is grpcidem's: retryable codes and server failures are
// not stored (the retry runs), everything else is.
func DefaultStoreCode(c connect.Code) bool { return rpcidem.DefaultStoreCode(uint32(c)) }

// Interceptor is a connect.Interceptor for handlers (server side) that
// protects unary procedures with idempotency keys. Streams pass through.
type Interceptor struct {
	cfg   Config
	guard *rpcidem.Guard
}

var _ connect.Interceptor = (*Interceptor)(nil)

// New returns an interceptor over store.
func New(store idem.Store, cfg *Config) (*Interceptor, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Header == "" {
		c.Header = DefaultHeader
	}
	c.Header = textproto.CanonicalMIMEHeaderKey(c.Header)
	if c.ScopeFunc == nil {
		c.ScopeFunc = HeaderScope("Authorization")
	}
	if c.StoreCodeFunc == nil {
		c.StoreCodeFunc = DefaultStoreCode
	}
	g, err := rpcidem.NewGuard(rpcidem.Guard{
		Store: store, Lease: c.Lease, Retention: c.Retention, MaxResponse: c.MaxResponse,
		InFlightRetryAfter: c.InFlightRetryAfter, Logger: c.Logger, Observer: c.Observer, Protocol: observe.ProtocolConnect,
		StoreCode: func(code uint32) bool { return c.StoreCodeFunc(connect.Code(code)) },
	})
	if err != nil {
		return nil, err
	}
	c.Logger = g.Logger
	return &Interceptor{cfg: c, guard: g}, nil
}

// HeaderScope returns a ScopeFunc that hashes the named request headers
// (every value of each, in order); a call that carries none of them, or
// only empty or white-space-only values, is anonymous. It normalises as
// httpidem.HeaderScope does: leading and trailing white space is ignored,
// and for Authorization and Proxy-Authorization the auth scheme is
// compared case-insensitively and runs of spaces and tabs count as one
// space, so "Bearer t" and "bearer  t" are one caller. The credentials
// stay case-sensitive, and a value with no space or tab (no scheme) is
// compared byte for byte. The default ScopeFunc is
// HeaderScope("Authorization").
func HeaderScope(names ...string) func(context.Context, connect.AnyRequest) (string, error) {
	canon := make([]string, len(names))
	auth := make([]bool, len(names))
	for i, n := range names {
		canon[i] = textproto.CanonicalMIMEHeaderKey(n)
		auth[i] = scopehash.IsCredentials(n)
	}
	return func(_ context.Context, req connect.AnyRequest) (string, error) {
		h := req.Header()
		var stack [256]byte
		buf := stack[:0]
		present := false
		for i, name := range canon {
			vs := h[name]
			var ok bool
			buf, ok = scopehash.AppendValues(buf, vs, auth[i])
			present = present || ok
		}
		if !present {
			return "", nil
		}
		return scopehash.Sum("c2:", buf), nil
	}
}

// WrapStreamingClient passes streams through.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler passes streams through: their messages cannot be
// replayed as one answer.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// WrapUnary protects unary handlers; on clients it passes calls through
// (use ClientInterceptor there).
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		proc := req.Spec().Procedure
		if req.Spec().IsClient || (i.cfg.ProcedureFunc != nil && !i.cfg.ProcedureFunc(proc)) {
			return next(ctx, req)
		}
		id, ok, err := i.keyOf(ctx, proc, req)
		switch {
		case err != nil:
			return nil, i.reject(ctx, proc, connect.NewError(connect.CodeInvalidArgument, err))
		case !ok && i.cfg.RequireKey:
			return nil, i.reject(ctx, proc, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("idempotency key required (header %s)", i.cfg.Header)))
		case !ok:
			i.guard.Observe(ctx, proc, idem.Key{}, observe.DecisionKeyless, 0, nil)
			return next(ctx, req)
		}
		scope, err := i.cfg.ScopeFunc(ctx, req)
		if err != nil {
			i.cfg.Logger.InfoContext(ctx, "idempotency scope rejected", "procedure", proc, "err", err)
			return nil, i.reject(ctx, proc, connect.NewError(connect.CodeInvalidArgument, errors.New("idempotency scope rejected")))
		}
		if scope == "" && !i.cfg.AnonymousShared {
			return nil, i.reject(ctx, proc, connect.NewError(connect.CodeInvalidArgument, errors.New("a keyed call needs a caller identity (Authorization)")))
		}
		key, err := idem.NewKey(scope, id)
		if err != nil {
			return nil, i.reject(ctx, proc, connect.NewError(connect.CodeInvalidArgument, err))
		}
		msg, ok := req.Any().(proto.Message)
		if !ok {
			return nil, i.reject(ctx, proc, connect.NewError(connect.CodeInternal, fmt.Errorf("connectidem: request of %s is not a proto message", proc)))
		}
		fp, err := rpcidem.Fingerprint(proc, msg)
		if err != nil {
			return nil, i.reject(ctx, proc, connect.NewError(connect.CodeInternal, fmt.Errorf("connectidem: encode request: %w", err)))
		}

		var resp connect.AnyResponse
		var herr error
		a, outcome, ref := i.guard.Run(ctx, proc, key, fp, func(wctx context.Context) rpcidem.Answer {
			resp, herr = next(wctx, req)
			return answerOf(ctx, resp, herr)
		})
		switch outcome {
		case rpcidem.Executed:
			return resp, herr
		case rpcidem.Replayed:
			return replay(ctx, a)
		}
		cerr := connect.NewError(connect.Code(ref.Code), errors.New(ref.Message))
		if ref.RetryAfter > 0 {
			if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(ref.RetryAfter)}); err == nil {
				cerr.AddDetail(d)
			}
		}
		return nil, cerr
	}
}

// reject reports a call refused before the guard (bad key, scope or
// request) and returns err.
func (i *Interceptor) reject(ctx context.Context, proc string, err *connect.Error) error {
	i.guard.Observe(ctx, proc, idem.Key{}, observe.DecisionRejected, uint32(err.Code()), err)
	return err
}

func (i *Interceptor) keyOf(ctx context.Context, proc string, req connect.AnyRequest) (string, bool, error) {
	if i.cfg.KeyFunc != nil {
		if k, ok := i.cfg.KeyFunc(ctx, proc, req.Any()); ok {
			return k, true, idem.ValidateID(k)
		}
	}
	vs := req.Header().Values(i.cfg.Header)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		k, err := keyheader.Parse(vs[0])
		return k, err == nil, err
	}
	return "", false, &idem.KeyError{Reason: fmt.Sprintf("%d %s headers; send one", len(vs), i.cfg.Header)}
}

// answerOf is what gets stored of a handler's outcome: the response message
// or the error with its details and metadata, and the headers the handler set
// on the response or through the call info.
func answerOf(ctx context.Context, resp connect.AnyResponse, herr error) rpcidem.Answer {
	a := rpcidem.Answer{Header: http.Header{}, Trailer: http.Header{}}
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		merge(a.Header, ci.ResponseHeader())
		merge(a.Trailer, ci.ResponseTrailer())
	}
	if herr != nil {
		st := &spb.Status{Code: int32(connect.CodeOf(herr)), Message: herr.Error()}
		var ce *connect.Error
		if errors.As(herr, &ce) {
			st.Message = ce.Message()
			for _, d := range ce.Details() {
				st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
			}
			merge(a.Header, ce.Meta())
		}
		a.Status = st
		return a
	}
	a.Status = &spb.Status{}
	a.Response, _ = resp.Any().(proto.Message)
	merge(a.Header, resp.Header())
	merge(a.Trailer, resp.Trailer())
	return a
}

func merge(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append(dst[k], vs...)
	}
}

// replay answers with a stored answer. A stored error gets its trailers
// back through the call info, where the handler set them, so that the
// client sees them where the first answer put them.
func replay(ctx context.Context, a rpcidem.Answer) (connect.AnyResponse, error) {
	if a.Code() != rpcidem.OK {
		st := a.Status
		cerr := connect.NewError(connect.Code(st.GetCode()), errors.New(st.GetMessage()))
		for _, d := range st.GetDetails() {
			if ed, err := connect.NewErrorDetail(d); err == nil {
				cerr.AddDetail(ed)
			}
		}
		merge(cerr.Meta(), a.Header)
		cerr.Meta().Set(ReplayedHeader, "true")
		if len(a.Trailer) > 0 {
			if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
				merge(ci.ResponseTrailer(), a.Trailer)
			} else {
				merge(cerr.Meta(), a.Trailer)
			}
		}
		return nil, cerr
	}
	r := &replayed{msg: a.Response, header: http.Header(a.Header).Clone(), trailer: http.Header(a.Trailer).Clone()}
	if r.header == nil {
		r.header = http.Header{}
	}
	if r.trailer == nil {
		r.trailer = http.Header{}
	}
	r.header.Set(ReplayedHeader, "true")
	return r, nil
}

// replayed is a stored response. connect.AnyResponse has an unexported
// marker method, and connect.NewResponse needs the message's static type,
// which a replay does not have; embedding the interface (left nil: only
// its marker is promoted, and nothing calls it) gives a value the handler
// sends like any response: connect reads Any, Header and Trailer.
type replayed struct {
	connect.AnyResponse
	msg     proto.Message
	header  http.Header
	trailer http.Header
}

func (r *replayed) Any() any             { return r.msg }
func (r *replayed) Header() http.Header  { return r.header }
func (r *replayed) Trailer() http.Header { return r.trailer }

// ClientInterceptor gives every unary call that has no key a new one, so a
// retry made by re-sending the same request (connect's clients do not
// retry by themselves) keeps it: set the header once on the request you
// retry with.
type ClientInterceptor struct {
	// Header is the header the key goes in; default Idempotency-Key.
	Header string
}

// WrapUnary adds a key to client calls that lack one.
func (c ClientInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	h := c.Header
	if h == "" {
		h = DefaultHeader
	}
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient && req.Header().Get(h) == "" {
			var b [16]byte
			_, _ = rand.Read(b[:])
			req.Header().Set(h, `"`+hex.EncodeToString(b[:])+`"`)
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient passes streams through.
func (ClientInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler passes streams through.
func (ClientInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
