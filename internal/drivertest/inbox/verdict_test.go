package inbox_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
)

// redisReply is shaped like go-redis's server error replies.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// joined is shaped like the inbox's handler error (Unwrap() []error).
type joined struct{ errs []error }

func (e joined) Error() string   { return "joined" }
func (e joined) Unwrap() []error { return e.errs }

func TestPermanent(t *testing.T) {
	t.Parallel()
	if inbox.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	base := errors.New("unknown account 42")
	p := inbox.Permanent(base)
	if p.Error() != base.Error() || !errors.Is(p, base) || !inbox.IsPermanent(p) {
		t.Fatalf("Permanent(%v) = %v: text, Is or IsPermanent wrong", base, p)
	}
	for _, wrapped := range []error{fmt.Errorf("handler: %w", p), errors.Join(errors.New("x"), p), joined{[]error{inbox.ErrHandler, p}}} {
		if !inbox.IsPermanent(wrapped) {
			t.Errorf("IsPermanent(%v) = false", wrapped)
		}
	}
	for _, e := range []error{nil, base, context.Canceled} {
		if inbox.IsPermanent(e) {
			t.Errorf("IsPermanent(%v) = true", e)
		}
	}
}

func TestIsTransientTable(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("cannot parse"), false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{refused, true},
		{fmt.Errorf("inbox: begin: %w", refused), true},
		{syscall.ECONNRESET, true},
		{io.ErrUnexpectedEOF, false}, // alone, it is what a decoder says about a short input
		{io.EOF, false},
		{fmt.Errorf("decode order: %w", io.ErrUnexpectedEOF), false},
		{fmt.Errorf("query: %w", errors.Join(io.ErrUnexpectedEOF, refused)), true},
		{sql.ErrConnDone, true},
		{inbox.Permanent(refused), false}, // the explicit verdict wins
		{redisReply("LOADING Redis is loading the dataset in memory"), true},
		{redisReply("READONLY You can't write against a read only replica."), true},
		{redisReply("CLUSTERDOWN The cluster is down"), true},
		{redisReply("ERR unknown command"), false},
		{redisReply("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{errors.New("redis: connection pool timeout"), true},
		{fmt.Errorf("cache: %w", errors.New("redis: client is closed")), true},
		{joined{[]error{inbox.ErrHandler, redisReply("TRYAGAIN Multiple keys request during rehashing of slot")}}, true},
		{joined{[]error{inbox.ErrHandler, errors.New("bad input")}}, false},
		{idem.ErrInFlight, true}, // a dead consumer's claim, until its lease runs out
		{joined{[]error{inbox.ErrHandler, fmt.Errorf("step: %w", &idem.InFlightError{RetryAfter: time.Second})}}, true},
		{inbox.Permanent(idem.ErrInFlight), false},
	} {
		if got := inbox.IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%#v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A body that does not decode is poison, whichever decoder reports it and
// however the handler wraps it: encoding/json and protobuf (proto and the
// length-delimited protodelim) on empty and truncated input.
func TestDecoderErrorsAreNotTransient(t *testing.T) {
	t.Parallel()
	full, err := proto.Marshal(wrapperspb.String("order 42, pay 10"))
	if err != nil {
		t.Fatal(err)
	}
	var delimited bytes.Buffer
	if _, err := protodelim.MarshalTo(&delimited, wrapperspb.String("order 42, pay 10")); err != nil {
		t.Fatal(err)
	}
	decoders := map[string]func([]byte) error{
		"json.Decoder": func(b []byte) error {
			var v struct{ Order int }
			return json.NewDecoder(bytes.NewReader(b)).Decode(&v)
		},
		"json.Unmarshal": func(b []byte) error {
			var v struct{ Order int }
			return json.Unmarshal(b, &v)
		},
		"proto.Unmarshal": func(b []byte) error { return proto.Unmarshal(b, &wrapperspb.StringValue{}) },
		"protodelim": func(b []byte) error {
			return protodelim.UnmarshalFrom(bufio.NewReader(bytes.NewReader(b)), &wrapperspb.StringValue{})
		},
	}
	bodies := map[string][]byte{
		"empty":           {},
		"truncated json":  []byte(`{"Order": 4`),
		"truncated proto": full[:len(full)-3],
		"truncated delim": delimited.Bytes()[:delimited.Len()-3],
	}
	failures := 0
	for dn, decode := range decoders {
		for bn, body := range bodies {
			err := decode(body)
			if err == nil {
				continue // e.g. proto accepts an empty body as the zero message
			}
			failures++
			for _, e := range []error{err, fmt.Errorf("decode: %w", err), joined{[]error{inbox.ErrHandler, err}}} {
				if inbox.IsTransient(e) {
					t.Errorf("%s on %s body: IsTransient(%v) = true; a malformed body is poison", dn, bn, e)
				}
			}
		}
	}
	if failures < 8 {
		t.Fatalf("only %d decoder failures: the bodies are not malformed enough to test anything", failures)
	}
}

// The errors real clients return when the server is really gone: PostgreSQL
// behind a proxy that refuses (new connection) or resets (connection in the
// pool), Redis on a port where nothing listens. Each one, also wrapped the
// way a handler's error is by Process, is transient.
func TestIsTransientRealFaults(t *testing.T) {
	t.Parallel()
	base := testenv.Postgres.Need(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewFaultProxy(t, u.Host)
	db, err := sql.Open("pgx", testenv.Redirect(base, p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx) // a live pooled connection
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
	}
	defer conn.Close()
	p.Set(testenv.Refuse)
	_, resetErr := conn.ExecContext(ctx, "SELECT 1")
	_, refusedErr := db.ExecContext(ctx, "SELECT 1")

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + fmt.Sprint(testenv.RefusedPort(t)), MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	redisErr := rdb.Ping(ctx).Err()

	for name, err := range map[string]error{"postgres reset": resetErr, "postgres refused": refusedErr, "redis refused": redisErr} {
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if !inbox.IsTransient(err) || !inbox.IsTransient(joined{[]error{inbox.ErrHandler, err}}) {
			t.Errorf("%s: IsTransient(%v) = false", name, err)
		}
	}
}
