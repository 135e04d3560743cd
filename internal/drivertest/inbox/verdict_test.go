package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
		{io.ErrUnexpectedEOF, true},
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
	} {
		if got := inbox.IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%#v) = %v, want %v", c.err, got, c.want)
		}
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

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + fmt.Sprint(testenv.FreePort(t)), MaxRetries: -1, DialTimeout: time.Second})
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
