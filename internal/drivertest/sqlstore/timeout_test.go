package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// A driver's own connect or read timeout, while the caller's context is
// still alive, is a store that did not answer: IsUnavailable, never a bare
// context error that a caller would read as its own cancellation. The
// server is black-holed by a fault proxy on a real TCP connection.
func TestDriverTimeoutsAreUnavailable(t *testing.T) {
	params := map[string]string{
		"Postgres": "connect_timeout=1",
		"MySQL":    "timeout=1s&readTimeout=1s&writeTimeout=1s",
	}
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, dsn := b.open(t)
			table := storeTable(newStore(t, b, db))
			p := testenv.NewFaultProxy(t, serverAddr(dsn))
			pool := openDSN(t, b.driver, testenv.Redirect(dsn, p.Addr())+sep(dsn)+params[b.name])
			s, err := sqlstore.New(pool, &sqlstore.Config{Dialect: b.dialect, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			key := idem.MustKey("", "timeouts")
			c, err := s.Begin(ctxT(t), idem.BeginRequest{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			// Read timeouts on an open connection (MySQL's readTimeout),
			// connect timeouts on new ones (both).
			p.Set(testenv.BlackHole)
			pool.SetMaxIdleConns(0) // every statement dials: connect timeouts too
			_, err = s.Get(ctx, key)
			if !idem.IsUnavailable(err) || ctx.Err() != nil {
				t.Errorf("Get with the server black-holed = %v (caller's context: %v), want IsUnavailable", err, ctx.Err())
			}
			if err := s.Complete(ctx, c.Owner, []byte("x")); !idem.IsUnavailable(err) || ctx.Err() != nil {
				t.Errorf("Complete with the server black-holed = %v, want IsUnavailable", err)
			}
			if _, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", "timeouts-2")}); !idem.IsUnavailable(err) {
				t.Errorf("Begin with the server black-holed = %v, want IsUnavailable", err)
			}

			// The caller's own deadline, though, is the caller's error.
			short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel2()
			if _, err := s.Get(short, key); short.Err() == nil || idem.IsUnavailable(err) {
				t.Errorf("Get past the caller's own deadline = %v, want the context's error", err)
			}
		})
	}
}
