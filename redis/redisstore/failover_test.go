package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
)

// redisFailover is a Redis master and replica that fail over as an
// operator's automation would: the replica is cut off from the master for
// a moment (its replication link, a fault proxy, becomes a black hole), the
// master is SIGKILLed (its data is gone: no persistence), the replica is
// promoted (REPLICAOF NO ONE), the store's clients are switched to it (the
// switchDialer closes their connections and dials the new master), and the
// old master's port comes back as an empty replica of the new master, which
// it fully synchronises from, so that the next failover has a replica to
// promote.
type redisFailover struct {
	mu      sync.Mutex
	master  *testenv.RedisServer
	replica *testenv.RedisServer
	link    *testenv.FaultProxy // the replica's link to the master
	clients *switchDialer
}

func newRedisFailover(t *testing.T) *redisFailover {
	pair := testenv.StartRedisPair(t)
	return &redisFailover{master: pair.Master, replica: pair.Replica, link: pair.Link,
		clients: newSwitchDialer(pair.Master.Addr())}
}

func (f *redisFailover) Failover(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.link.Set(testenv.BlackHole)
	time.Sleep(300 * time.Millisecond) // writes meanwhile reach the master only
	f.master.Kill()
	f.replica.ReplicaOf("") // promote
	f.clients.Switch(f.replica.Addr())
	link := testenv.NewFaultProxy(t, f.replica.Addr())
	f.master.ReplicaOf(link.Addr())
	f.master.Start() // an empty server: no persistence
	testenv.WaitRedisReplica(t, f.replica, f.master)
	f.master, f.replica, f.link = f.replica, f.master, link
}

// TestFailoverWaitReplicas: with WaitReplicas 1, three failovers of a Redis
// master (each preceded by a cut of the replica's link) lose no result a
// caller was given and run no key twice, with and without AtMostOnce.
func TestFailoverWaitReplicas(t *testing.T) {
	t.Parallel()
	for _, amo := range []bool{false, true} {
		name := "plain"
		if amo {
			name = "AtMostOnce"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newRedisFailover(t)
			s := storeVia(t, f.clients, &redisstore.Config{WaitReplicas: 1, WaitTimeout: time.Second})
			rep := idemtest.RunFailover(t, idemtest.FailoverTopology{Store: s, Failover: f.Failover},
				idemtest.FailoverOptions{Failovers: 3, AtMostOnce: amo})
			if rep.Acknowledged == 0 {
				t.Fatalf("no call was acknowledged: %+v", rep)
			}
		})
	}
}

// TestFailoverAsyncRefused: the same pair without WaitReplicas. The store
// refuses to acknowledge anything (ErrAsyncReplication, unavailable) until
// the operator allows asynchronous replication, and then it works (and a
// failover may lose what it acknowledged: TestFailoverWaitReplicas's rig
// without WAIT is what issue 33 measured).
func TestFailoverAsyncRefused(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	f := newRedisFailover(t)
	work := func(context.Context) (string, error) { return "ran", nil }

	s := storeVia(t, f.clients, nil)
	if err := s.Check(ctx); !errors.Is(err, idem.ErrAsyncReplication) {
		t.Fatalf("Check = %v, want ErrAsyncReplication", err)
	}
	_, err := idem.Do(ctx, s, key(t), nil, work)
	if !errors.Is(err, idem.ErrAsyncReplication) || !idem.IsUnavailable(err) {
		t.Fatalf("Do without WaitReplicas = %v, want ErrAsyncReplication", err)
	}

	allowed := storeVia(t, f.clients, &redisstore.Config{AllowAsyncReplication: true})
	if err := allowed.Check(ctx); err != nil {
		t.Fatalf("Check with AllowAsyncReplication = %v", err)
	}
	if v, err := idem.Do(ctx, allowed, key(t), nil, work); err != nil || v != "ran" {
		t.Fatalf("Do with AllowAsyncReplication = %q, %v", v, err)
	}
}
