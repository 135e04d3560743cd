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
		db := galeraDB(t, cluster.Nodes[0], "")
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

	t.Run("MigrateAcrossNodes", func(t *testing.T) {
		// GET_LOCK holds on one node only: three processes migrating one
		// table through three nodes at once collide, and Migrate must
		// sort it out (each round a fresh table).
		for round := range 5 {
			table := testenv.Name("idem")
			var wg sync.WaitGroup
			for _, n := range cluster.Nodes {
				s, err := sqlstore.New(galeraDB(t, n, ""), &sqlstore.Config{Dialect: sqlstore.MySQL, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					if err := s.Migrate(ctxT(t)); err != nil {
						t.Errorf("round %d, node %d: Migrate: %v", round, n.Index+1, err)
					}
				})
			}
			wg.Wait()
		}
	})

	t.Run("Replication", func(t *testing.T) {
		s, err := sqlstore.New(galeraDB(t, cluster.Nodes[1], ""), &sqlstore.Config{Dialect: sqlstore.MySQL, Table: testenv.Name("idem")})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := s.Replication(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Galera node 2: %v", rep)
		if rep.Mode != idem.ReplicationSynchronous || rep.Replicas != 2 || rep.Waits != 2 {
			t.Fatalf("Replication() = %+v, want synchronous with 2 replicas", rep)
		}
	})

	t.Run("SessionWithoutReplication", func(t *testing.T) {
		// wsrep_on=OFF in the DSN: this session's writes stay on its
		// node. The store must see it and refuse to grant claims.
		s, err := sqlstore.New(galeraDB(t, cluster.Nodes[2], "&wsrep_on=OFF"), &sqlstore.Config{Dialect: sqlstore.MySQL, Table: testenv.Name("idem")})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := s.Replication(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Galera node 3 with wsrep_on=OFF: %v", rep)
		if rep.Mode != idem.ReplicationAsynchronous {
			t.Fatalf("Replication() = %+v, want asynchronous", rep)
		}
		_, err = s.Begin(ctxT(t), idem.BeginRequest{Key: idem.MustKey("galera", testenv.Name("k")), Lease: time.Minute})
		checkRefused(t, err)
	})

	// wsrep_retry_autocommit=0: the server no longer runs a statement
	// that failed certification once more by itself, so every lost
	// certification reaches the store as a deadlock (1213), as the second
	// loss in a row does with the default of 1.
	// wsrep_sync_wait=1: reads wait until the node has applied every
	// write the cluster committed before them (causal reads), which the
	// store does not need but must work with.
	for _, v := range []struct{ name, params string }{
		{"defaults", ""},
		{"retry_autocommit=0", "&wsrep_retry_autocommit=0"},
		{"sync_wait=1", "&wsrep_sync_wait=1"},
	} {
		t.Run(v.name, func(t *testing.T) { galeraAcrossNodes(t, cluster, v.params) })
	}
}

// galeraAcrossNodes runs callers of the same keys on the three nodes at
// once; params are added to each node's DSN.
func galeraAcrossNodes(t *testing.T, cluster *testenv.GaleraCluster, params string) {
	t.Run("DuplicatesAcrossNodes", func(t *testing.T) {
		stores := galeraStores(t, cluster, params)
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
		before := galeraConflicts(t, cluster)
		close(start)
		wg.Wait()
		close(errs)
		t.Logf("%d certification failures and brute-force aborts over the nodes", galeraConflicts(t, cluster)-before)
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
		stores := galeraStores(t, cluster, params)
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
		before := galeraConflicts(t, cluster)
		close(start)
		wg.Wait()
		close(errs)
		t.Logf("%d certification failures and brute-force aborts over the nodes", galeraConflicts(t, cluster)-before)
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
func galeraDB(t testing.TB, n *testenv.GaleraNode, params string) *sql.DB {
	t.Helper()
	db := openDSN(t, "mysql", n.DSN("test")+params)
	db.SetMaxOpenConns(24)
	db.SetMaxIdleConns(24)
	return db
}

// galeraStores returns one Store per node, all on one fresh table: the
// first node migrates it, and the others wait (wsrep_sync_wait) until they
// have applied the schema before they check it.
func galeraStores(t *testing.T, c *testenv.GaleraCluster, params string) []*sqlstore.Store {
	t.Helper()
	table := testenv.Name("idem")
	var stores []*sqlstore.Store
	for _, n := range c.Nodes {
		db := galeraDB(t, n, params)
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

// galeraConflicts sums, over the nodes, the transactions that lost a
// conflict with another node's write: certification failures (the local
// commit came second) and brute-force aborts (a replicated write rolled
// back a local transaction).
func galeraConflicts(t *testing.T, c *testenv.GaleraCluster) int {
	t.Helper()
	total := 0
	for _, n := range c.Nodes {
		db := openDSN(t, "mysql", n.DSN(""))
		rows, err := db.QueryContext(ctxT(t), `SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			var v int
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			total += v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		db.Close()
	}
	return total
}
