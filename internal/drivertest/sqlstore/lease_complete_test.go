package sqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// completeVia is a store whose Complete goes through another store on the
// same table (its pool reaches PostgreSQL through a slow link); every
// other call, the renewals among them, takes the direct pool.
type completeVia struct {
	idem.Store
	slow idem.Store
}

func (s completeVia) Complete(ctx context.Context, o idem.Owner, r []byte) error {
	return s.slow.Complete(ctx, o, r)
}

// A Complete that reaches PostgreSQL slower than the lease (a fault proxy
// adds a lease of latency to each chunk of its connection) keeps the claim
// (issue 34 §6): several callers, each a "proxy" of its own over the same
// table, race for the same keys with Do, waiting for one another; the
// work of each key runs exactly once, and no holder loses its claim while
// completing. Before, the heartbeat stopped before Complete and another
// caller took each key over and ran it again.
func TestLeaseHeldThroughSlowCompletePostgres(t *testing.T) {
	t.Parallel()
	b := backends[0]
	db, dsn := b.open(t)
	table := storeTable(newStore(t, b, db))
	// 3s, not less: renewals every third of it must keep up on a machine
	// at load 20-30 under -race (a 1s lease lapsed there, and the work ran
	// twice with no bug in the heartbeat).
	const lease = 3 * time.Second
	p := testenv.NewFaultProxy(t, serverAddr(dsn))
	pool := openDSN(t, "pgx", testenv.Redirect(dsn, p.Addr()))
	const callers, keys = 4, 3
	pool.SetMaxIdleConns(callers * keys)
	// Open the slow pool's connections before the link slows down: the
	// latency is for Complete's statements, not for dialling.
	var conns []interface{ Close() error }
	for range keys {
		c, err := pool.Conn(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PingContext(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	slow, err := sqlstore.New(pool, &sqlstore.Config{Dialect: b.dialect, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := sqlstore.New(db, &sqlstore.Config{Dialect: b.dialect, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	p.SetLatency(lease) // each chunk: a Complete takes at least two leases

	var runs [keys]atomic.Int32
	var completes atomic.Int32
	s := completeVia{Store: direct, slow: countingComplete{slow, &completes}}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				k := (i + c) % keys // each caller in its own order
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				_, err := idem.Do(ctx, s, idem.MustKey("t", fmt.Sprint("slow-complete-", k)),
					&idem.Options{Lease: lease, Wait: true, FinishGrace: time.Minute},
					func(context.Context) (int, error) {
						runs[k].Add(1)
						return k, nil
					})
				cancel()
				if err != nil {
					t.Errorf("caller %d, key %d: %v", c, k, err)
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		if n := runs[k].Load(); n != 1 {
			t.Errorf("key %d: the work ran %d times (%d Complete calls in all, each slower than the %v lease)", k, n, completes.Load(), lease)
		}
	}
}

type countingComplete struct {
	idem.Store
	n *atomic.Int32
}

func (s countingComplete) Complete(ctx context.Context, o idem.Owner, r []byte) error {
	s.n.Add(1)
	return s.Store.Complete(ctx, o, r)
}
