package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// TestGalera runs sqlstore's MySQL dialect on a private three-node MariaDB
// Galera cluster: the conformance suite on one node, and callers of the
// same keys spread over all three nodes, where certification, not a row
// lock, decides which of two concurrent writes on different nodes commits.
func TestGalera(t *testing.T) {
	t.Parallel()
	began := time.Now()
	cluster := testenv.StartGalera(t)
	t.Logf("three-node Galera cluster ready in %.1fs", time.Since(began).Seconds())

	t.Run("Conformance", func(t *testing.T) {
		db := galeraDB(t, cluster.Nodes[0])
		b := galeraBackend()
		idemtest.RunStore(t, idemtest.Harness{
			New: func(t *testing.T) idem.Store { return newStore(t, b, db) },
			Unreachable: func(t *testing.T) idem.Store {
				s, err := sqlstore.New(openDSN(t, "mysql", b.closedPort(t)), &sqlstore.Config{Dialect: sqlstore.MySQL})
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		})
	})

	t.Run("DuplicatesAcrossNodes", func(t *testing.T) {
		stores := galeraStores(t, cluster)
		const keys, perNode = 40, 2
		var runs [keys]atomic.Int32
		var wg sync.WaitGroup
		results := make([][]string, keys)
		var mu sync.Mutex
		errs := make(chan error, keys*perNode*len(stores))
		start := make(chan struct{})
		for k := range keys {
			key := idem.MustKey("galera", testenv.Name("dup")+"-"+strconv.Itoa(k))
			for _, s := range stores {
				for range perNode {
					wg.Go(func() {
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						defer cancel()
						v, err := idem.Do(ctx, s, key, &idem.Options{Wait: true, Lease: time.Minute}, func(context.Context) (string, error) {
							n := runs[k].Add(1)
							return fmt.Sprintf("key %d run %d", k, n), nil
						})
						if err != nil {
							errs <- fmt.Errorf("key %d: %w", k, err)
							return
						}
						mu.Lock()
						results[k] = append(results[k], v)
						mu.Unlock()
					})
				}
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for k := range keys {
			if n := runs[k].Load(); n != 1 {
				t.Errorf("key %d ran %d times across the nodes, want exactly once", k, n)
			}
			for _, v := range results[k] {
				if v != results[k][0] {
					t.Errorf("key %d: callers got different results: %q", k, results[k])
					break
				}
			}
		}
	})

	t.Run("BeginAcrossNodes", func(t *testing.T) {
		// The same race one level down: six Begins per key, two per node,
		// exactly one Acquired and five InFlight, and no errors (a lost
		// certification is a lost race, never an outage).
		stores := galeraStores(t, cluster)
		const keys = 40
		var wg sync.WaitGroup
		var acquired [keys]atomic.Int32
		errs := make(chan error, keys*6)
		start := make(chan struct{})
		for k := range keys {
			req := idem.BeginRequest{Key: idem.MustKey("galera", testenv.Name("begin")), Fingerprint: idem.FingerprintOf([]byte("a")), Lease: time.Minute}
			for _, s := range stores {
				for range 2 {
					wg.Go(func() {
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						c, err := s.Begin(ctx, req)
						switch {
						case err != nil:
							errs <- fmt.Errorf("key %d: %w", k, err)
						case c.Outcome == idem.Acquired:
							acquired[k].Add(1)
						case c.Outcome != idem.InFlight:
							errs <- fmt.Errorf("key %d: outcome %v, want acquired or in flight", k, c.Outcome)
						}
					})
				}
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for k := range keys {
			if n := acquired[k].Load(); n != 1 {
				t.Errorf("key %d acquired %d times across the nodes, want exactly once", k, n)
			}
		}
	})
}

// galeraBackend is the MySQL backend pointed at nothing: the Galera tests
// open their own pools.
func galeraBackend() backend {
	for _, b := range backends {
		if b.dialect == sqlstore.MySQL {
			return b
		}
	}
	panic("no MySQL backend")
}

// galeraDB opens a pool on node's database "test".
func galeraDB(t testing.TB, n *testenv.GaleraNode) *sql.DB {
	t.Helper()
	db := openDSN(t, "mysql", n.DSN("test"))
	db.SetMaxOpenConns(24)
	db.SetMaxIdleConns(24)
	return db
}

// galeraStores returns one Store per node, all on one fresh table: the
// first node migrates it, and the others wait (wsrep_sync_wait) until they
// have applied the schema before they check it.
func galeraStores(t *testing.T, c *testenv.GaleraCluster) []*sqlstore.Store {
	t.Helper()
	table := testenv.Name("idem")
	var stores []*sqlstore.Store
	for _, n := range c.Nodes {
		db := galeraDB(t, n)
		if _, err := db.ExecContext(ctxT(t), "SET STATEMENT wsrep_sync_wait = 15 FOR SELECT 1"); err != nil {
			t.Fatalf("node %d: sync wait: %v", n.Index+1, err)
		}
		s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.MySQL, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(ctxT(t)); err != nil {
			t.Fatalf("node %d: Migrate: %v", n.Index+1, err)
		}
		stores = append(stores, s)
	}
	return stores
}
