package grpcidem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/keyheader"
	"github.com/idemkit/idem/internal/rpcidem"
	"github.com/idemkit/idem/internal/scopehash"
	"github.com/idemkit/idem/observe"
)

// Metadata keys.
const (
	// DefaultMetadataKey carries the key, like HTTP's Idempotency-Key.
	DefaultMetadataKey = "idempotency-key"
	// ReplayedMetadataKey is set to "true" in the header metadata of every
	// replayed answer, and of no first answer.
	ReplayedMetadataKey = "idempotent-replayed"
	// RetryPushbackMetadataKey is the trailer of an Aborted answer to a
	// call whose key is in flight: the milliseconds to wait, which gRPC's
	// retry policy (a service config with retryPolicy and
	// retryableStatusCodes ["ABORTED"]) honours before its next attempt.
	RetryPushbackMetadataKey = "grpc-retry-pushback-ms"
)

// DefaultMaxResponse is the default Config.MaxResponse.
const DefaultMaxResponse = rpcidem.DefaultMaxResponse

// Config tunes the interceptor. A nil *Config means the defaults.
type Config struct {
	// MetadataKey names the metadata entry that carries the key. Default
	// "idempotency-key". Its value is an RFC 8941 sf-string ("order-1") or
	// a bare token (order-1), as httpidem reads the HTTP header:
	// both spellings name one key.
	MetadataKey string
	// KeyFunc, when set, reads the key from the request message itself, as
	// AIP-155's request_id field: it returns the key and true, or false when
	// the request carries none (then the metadata is consulted).
	KeyFunc func(ctx context.Context, fullMethod string, req any) (string, bool)
	// RequireKey answers InvalidArgument to a call without a key. When false
	// (the default) such a call runs unprotected.
	RequireKey bool
	// MethodFunc selects the protected methods by full name
	// ("/pkg.Service/Method"). Default: every unary method.
	MethodFunc func(fullMethod string) bool
	// ScopeFunc returns what the server knows about the caller, so that one
	// caller's key never replays another caller's answer. Default
	// MetadataScope("authorization"). An empty scope is anonymous.
	ScopeFunc func(ctx context.Context) (string, error)
	// AnonymousShared lets keyed calls without a caller identity share one
	// keyspace. Off by default: such calls are refused, because any
	// anonymous caller could otherwise replay another's answer.
	AnonymousShared bool
	// StoreCodeFunc decides which status codes are stored and replayed;
	// for the others the claim is released so that a retry runs again.
	// Default DefaultStoreCode.
	StoreCodeFunc func(codes.Code) bool
	// Lease and Retention are passed to Store.Begin (zero: the defaults).
	Lease     time.Duration
	Retention time.Duration
	// MaxResponse bounds a stored answer in bytes. A larger one is
	// delivered once and recorded as not replayable: its retries get
	// FailedPrecondition and the handler never runs again. Default 4 MiB.
	MaxResponse int
	// InFlightRetryAfter caps the RetryInfo delay of an in-flight answer.
	// Default one second.
	InFlightRetryAfter time.Duration
	// Logger receives one line per refusal and store failure, with the
	// hashed key only. Default slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told of each decision, store call and phase,
	// as httpidem's is: a hook (observe.ObserverFunc), promidem or
	// otelidem. Events carry the full method name as Method and the
	// answer's status code as Status. Nil observes nothing.
	Observer observe.Observer
}

// DefaultStoreCode stores every answer except those that say the call may
// succeed if retried (Canceled, DeadlineExceeded, ResourceExhausted,
// Aborted, Unavailable) or that the server failed (Unknown, Internal,
// DataLoss): the same idea as HTTP, where 5xx, 408 and 429 are not stored.
func DefaultStoreCode(c codes.Code) bool { return rpcidem.DefaultStoreCode(uint32(c)) }

// MetadataScope returns a ScopeFunc that hashes the named incoming
// metadata entries (all values, in order). A call without any of them, or
// with only empty or white-space-only values, is anonymous.
//
// Values are compared as httpidem.HeaderScope compares headers: leading
// and trailing white space is ignored, and for authorization and
// proxy-authorization the auth scheme is compared case-insensitively and
// runs of spaces and tabs count as one space, so "Bearer t" and
// "bearer  t" are one caller. The credentials stay case-sensitive, and a
// value with no space or tab (no scheme) is compared byte for byte.
func MetadataScope(names ...string) func(ctx context.Context) (string, error) {
	auth := make([]bool, len(names))
	for i, n := range names {
		auth[i] = scopehash.IsCredentials(n)
	}
	return func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		var stack [256]byte
		buf := stack[:0]
		present := false
		for i, n := range names {
			vs := md.Get(n)
			var ok bool
			buf, ok = scopehash.AppendValues(buf, vs, auth[i])
			present = present || ok
		}
		if !present {
			return "", nil
		}
		return scopehash.Sum("g2:", buf), nil
	}
}

// Interceptor protects unary gRPC methods with idempotency keys.
type Interceptor struct {
	cfg   Config
	guard *rpcidem.Guard
}

// New returns an interceptor over store.
func New(store idem.Store, cfg *Config) (*Interceptor, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.MetadataKey == "" {
		c.MetadataKey = DefaultMetadataKey
	}
	if c.ScopeFunc == nil {
		c.ScopeFunc = MetadataScope("authorization")
	}
	if c.StoreCodeFunc == nil {
		c.StoreCodeFunc = DefaultStoreCode
	}
	g, err := rpcidem.NewGuard(rpcidem.Guard{
		Store: store, Lease: c.Lease, Retention: c.Retention, MaxResponse: c.MaxResponse,
		InFlightRetryAfter: c.InFlightRetryAfter, Logger: c.Logger, Observer: c.Observer, Protocol: observe.ProtocolGRPC,
		StoreCode: func(code uint32) bool { return c.StoreCodeFunc(codes.Code(code)) },
	})
	if err != nil {
		return nil, err
	}
	c.Logger = g.Logger
	return &Interceptor{cfg: c, guard: g}, nil
}

// Unary returns the server interceptor. Streaming methods are not covered:
// register no stream interceptor of this package (none exists), and make
// streaming methods idempotent by their own business keys.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return i.intercept
}

func (i *Interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if i.cfg.MethodFunc != nil && !i.cfg.MethodFunc(info.FullMethod) {
		return handler(ctx, req)
	}
	id, ok, err := i.keyOf(ctx, info.FullMethod, req)
	switch {
	case err != nil:
		return nil, i.reject(ctx, info.FullMethod, status.Error(codes.InvalidArgument, err.Error()))
	case !ok && i.cfg.RequireKey:
		return nil, i.reject(ctx, info.FullMethod, status.Errorf(codes.InvalidArgument, "idempotency key required (metadata %q)", i.cfg.MetadataKey))
	case !ok:
		i.guard.Observe(ctx, info.FullMethod, idem.Key{}, observe.DecisionKeyless, 0, nil)
		return handler(ctx, req)
	}
	scope, err := i.cfg.ScopeFunc(ctx)
	if err != nil {
		i.cfg.Logger.InfoContext(ctx, "idempotency scope rejected", "method", info.FullMethod, "err", err)
		return nil, i.reject(ctx, info.FullMethod, status.Error(codes.InvalidArgument, "idempotency scope rejected"))
	}
	if scope == "" && !i.cfg.AnonymousShared {
		return nil, i.reject(ctx, info.FullMethod, status.Error(codes.InvalidArgument, "a keyed call needs a caller identity (authorization metadata)"))
	}
	key, err := idem.NewKey(scope, id)
	if err != nil {
		return nil, i.reject(ctx, info.FullMethod, status.Error(codes.InvalidArgument, err.Error()))
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, i.reject(ctx, info.FullMethod, status.Errorf(codes.Internal, "grpcidem: request of %s is not a proto message", info.FullMethod))
	}
	fp, err := rpcidem.Fingerprint(info.FullMethod, msg)
	if err != nil {
		return nil, i.reject(ctx, info.FullMethod, status.Errorf(codes.Internal, "grpcidem: encode request: %v", err))
	}

	var resp any
	var herr error
	a, outcome, ref := i.guard.Run(ctx, info.FullMethod, key, fp, func(wctx context.Context) rpcidem.Answer {
		cs := &captureStream{inner: grpc.ServerTransportStreamFromContext(ctx)}
		if cs.inner != nil {
			wctx = grpc.NewContextWithServerTransportStream(wctx, cs)
		}
		resp, herr = handler(wctx, req)
		a := rpcidem.Answer{Status: status.Convert(herr).Proto(), Header: cs.header, Trailer: cs.trailer}
		if herr == nil {
			a.Response, _ = resp.(proto.Message)
		}
		return a
	})
	switch outcome {
	case rpcidem.Executed:
		return resp, herr
	case rpcidem.Replayed:
		hdr := metadata.MD(a.Header).Copy()
		hdr.Set(ReplayedMetadataKey, "true")
		if err := grpc.SetHeader(ctx, hdr); err != nil {
			return nil, status.Errorf(codes.Internal, "grpcidem: set header: %v", err)
		}
		if len(a.Trailer) > 0 {
			_ = grpc.SetTrailer(ctx, a.Trailer)
		}
		if a.Code() != rpcidem.OK {
			return nil, status.ErrorProto(a.Status)
		}
		return a.Response, nil
	}
	st := status.New(codes.Code(ref.Code), ref.Message)
	if ref.RetryAfter > 0 {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(ref.RetryAfter)})
		// gRPC's own retry policy reads the delay from this trailer: it
		// waits for the first call instead of spending its attempts (or
		// giving up) while the first call runs.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(RetryPushbackMetadataKey, strconv.FormatInt(max(ref.RetryAfter.Milliseconds(), 1), 10)))
	}
	return nil, st.Err()
}

// reject reports a call refused before the guard (bad key, scope or
// request) and returns err.
func (i *Interceptor) reject(ctx context.Context, method string, err error) error {
	i.guard.Observe(ctx, method, idem.Key{}, observe.DecisionRejected, uint32(status.Code(err)), err)
	return err
}

func (i *Interceptor) keyOf(ctx context.Context, method string, req any) (string, bool, error) {
	if i.cfg.KeyFunc != nil {
		if k, ok := i.cfg.KeyFunc(ctx, method, req); ok {
			return k, true, idem.ValidateID(k)
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vs := md.Get(i.cfg.MetadataKey)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		// The value is an sf-string ("order-1") or a bare token (order-1),
		// as in HTTP and Connect: both spellings name one key.
		id, err := keyheader.Parse(vs[0])
		return id, true, err
	}
	return "", false, &idem.KeyError{Reason: fmt.Sprintf("%d values of %s; send one", len(vs), i.cfg.MetadataKey)}
}

// captureStream records the metadata a handler sets, so that a replay can
// send it again, and passes everything on.
type captureStream struct {
	inner   grpc.ServerTransportStream
	header  metadata.MD
	trailer metadata.MD
}

func (c *captureStream) Method() string { return c.inner.Method() }

func (c *captureStream) SetHeader(md metadata.MD) error {
	c.header = metadata.Join(c.header, md)
	return c.inner.SetHeader(md)
}

func (c *captureStream) SendHeader(md metadata.MD) error {
	c.header = metadata.Join(c.header, md)
	return c.inner.SendHeader(md)
}

func (c *captureStream) SetTrailer(md metadata.MD) error {
	c.trailer = metadata.Join(c.trailer, md)
	return c.inner.SetTrailer(md)
}

// ClientConfig tunes the client interceptor. A nil *ClientConfig means the
// defaults.
type ClientConfig struct {
	// MetadataKey is the metadata entry the key goes in. Default
	// "idempotency-key".
	MetadataKey string
	// MethodFunc selects the methods that get a key. Default: all.
	MethodFunc func(fullMethod string) bool
	// NewKeyFunc makes a key for one logical call. Default: 128 random bits
	// in hex.
	NewKeyFunc func() string
}

// UnaryClientInterceptor gives every logical call that has no key yet a new
// one. gRPC's own retries (a service config retryPolicy) resend the call
// with the same metadata, so they reuse the key; a caller that retries by
// itself must put the key in the context once (metadata.AppendToOutgoingContext)
// and reuse that context, or the retry becomes a new operation. The
// package documentation (# Client) says which codes a retry policy should
// retry, how pushback and retry throttling combine with the key, as
// idemclient does for HTTP.
func UnaryClientInterceptor(cfg *ClientConfig) grpc.UnaryClientInterceptor {
	c := ClientConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.MetadataKey == "" {
		c.MetadataKey = DefaultMetadataKey
	}
	if c.NewKeyFunc == nil {
		c.NewKeyFunc = randomKey
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if c.MethodFunc == nil || c.MethodFunc(method) {
			if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(c.MetadataKey)) == 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, c.MetadataKey, c.NewKeyFunc())
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
