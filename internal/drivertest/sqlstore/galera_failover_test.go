package sqlstore_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// A three-node Galera cluster whose node the clients write to is failed
// over three times, without and with AtMostOnce (one cluster each, in
// parallel): the node is cut off from the other two (gmcast.isolate),
// SIGKILLed half a second later, the clients' forwarder moves to the next
// node, and the killed node is restarted on its data directory and rejoins
// (IST) before the next round. No result a caller was given is lost and no
// key runs twice: a Galera commit returns only after the other nodes have
// certified its write set.
func TestFailoverGalera(t *testing.T) {
	t.Parallel()
	for _, amo := range []bool{false, true} {
		name := "Plain"
		if amo {
			name = "AtMostOnce"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			galeraFailover(t, "", idemtest.FailoverOptions{Failovers: 3, AtMostOnce: amo})
		})
	}
}

// galeraLossEnv makes TestFailoverGaleraDetectsLoss run the losing
// failover itself (in the child process its parent starts).
const galeraLossEnv = "IDEM_TEST_GALERA_LOSS_CHILD"

// The control for TestFailoverGalera: the same failover, but the store's
// session sets wsrep_on=OFF (its writes stay on the node the clients use)
// and the store is allowed to acknowledge anyway. The failover must then
// lose acknowledged results and run their keys again, and RunFailover must
// fail the run: otherwise the failovers of TestFailoverGalera would prove
// nothing. The losing run is a child process, whose failure is the
// expected outcome.
func TestFailoverGaleraDetectsLoss(t *testing.T) {
	if os.Getenv(galeraLossEnv) != "" {
		galeraFailover(t, "&wsrep_on=OFF", idemtest.FailoverOptions{Failovers: 1, Callers: 4})
		return
	}
	if _, err := exec.LookPath("mariadbd"); err != nil {
		testenv.Unavailable(t, "MariaDB Galera (mariadbd)", err)
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFailoverGaleraDetectsLoss$", "-test.v")
	cmd.Env = append(os.Environ(), galeraLossEnv+"=1")
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil:
		t.Fatalf("a failover whose writes were never replicated lost nothing:\n%s", out)
	case strings.Contains(string(out), "--- SKIP"):
		t.Fatalf("the child skipped:\n%s", out)
	case !strings.Contains(string(out), "acknowledged results were lost") || strings.Contains(string(out), " 0 lost, 0 run twice"):
		t.Fatalf("the child failed, but not by losing acknowledged results:\n%s", out)
	}
}

// galeraFailover runs RunFailover on a fresh Galera cluster; params are
// added to the store's DSN. With params, the store is allowed to
// acknowledge on an asynchronously replicated server, and its table is
// created by a pool without them.
func galeraFailover(t *testing.T, params string, opt idemtest.FailoverOptions) {
	began := time.Now()
	cluster := testenv.StartGalera(t)
	t.Logf("three-node Galera cluster ready in %.1fs", time.Since(began).Seconds())
	current := 0
	proxy := testenv.NewFaultProxy(t, cluster.Nodes[current].Addr())
	// The pool reaches whichever node the forwarder points at; readTimeout
	// ends a statement stuck on a node that was cut off.
	dsn := "root@tcp(" + proxy.Addr() + ")/test?interpolateParams=true&timeout=5s&readTimeout=10s"
	table := testenv.Name("idem")
	m, err := sqlstore.New(openDSN(t, "mysql", dsn), &sqlstore.Config{Dialect: sqlstore.MySQL, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Migrate(ctxT(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	db := openDSN(t, "mysql", dsn+params)
	db.SetMaxOpenConns(24)
	db.SetMaxIdleConns(24)
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.MySQL, Table: table, AllowAsyncReplication: params != ""})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Replication(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if params == "" && (rep.Mode != idem.ReplicationSynchronous || rep.Replicas != 2) {
		t.Fatalf("Replication = %+v; want synchronous with 2 replicas", rep)
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
	}, opt)
}
