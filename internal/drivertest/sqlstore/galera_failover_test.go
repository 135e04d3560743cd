package sqlstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// A three-node Galera cluster whose node the clients write to is failed
// over three times, without and with AtMostOnce (one cluster each, in
// parallel): the node is cut off
// from the other two (gmcast.isolate), SIGKILLed half a second later, the
// clients' forwarder moves to the next node, and the killed node is
// restarted on its data directory and rejoins (IST) before the next round.
// No result a caller was given is lost and no key runs twice: a Galera
// commit returns only after the other nodes have certified its write set.
func TestFailoverGalera(t *testing.T) {
	t.Parallel()
	for _, amo := range []bool{false, true} {
		name := "Plain"
		if amo {
			name = "AtMostOnce"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			cluster := testenv.StartGalera(t)
			t.Logf("three-node Galera cluster ready in %.1fs", time.Since(began).Seconds())
			current := 0
			proxy := testenv.NewFaultProxy(t, cluster.Nodes[current].Addr())
			// The pool reaches whichever node the forwarder points at;
			// readTimeout ends a statement stuck on a node that was cut off.
			db := openDSN(t, "mysql", "root@tcp("+proxy.Addr()+")/test?interpolateParams=true&timeout=5s&readTimeout=10s")
			db.SetMaxOpenConns(24)
			db.SetMaxIdleConns(24)
			s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.MySQL, Table: testenv.Name("idem")})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctxT(t)); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			rep, err := s.Replication(ctxT(t))
			if err != nil || rep.Mode != idem.ReplicationSynchronous || rep.Replicas != 2 {
				t.Fatalf("Replication = %+v, %v; want synchronous with 2 replicas", rep, err)
			}
			idemtest.RunFailover(t, idemtest.FailoverTopology{
				Store: s,
				Failover: func(t *testing.T) {
					victim := cluster.Nodes[current]
					began := time.Now()
					if err := victim.Isolate(); err != nil {
						t.Fatalf("isolate node %d: %v", victim.Index+1, err)
					}
					time.Sleep(500 * time.Millisecond)
					victim.Kill()
					current = (current + 1) % len(cluster.Nodes)
					next := cluster.Nodes[current]
					proxy.SetTarget(next.Addr())
					next.WaitSize(2) // the survivors have evicted the victim
					answers(t, s)
					switched := time.Since(began)
					victim.Start() // rejoins; every node sees three again
					t.Logf("node %d killed, clients on node %d after %.1fs, node %d back after %.1fs",
						victim.Index+1, next.Index+1, switched.Seconds(), victim.Index+1, time.Since(began).Seconds())
				},
			}, idemtest.FailoverOptions{Failovers: 3, AtMostOnce: amo})
		})
	}
}
