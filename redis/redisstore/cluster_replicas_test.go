package redisstore_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisstore"
)

// cmdCalls returns how many times addr ran each command (INFO
// commandstats), by lower-case name.
func cmdCalls(t *testing.T, addr string) map[string]int {
	t.Helper()
	info, err := testenv.RedisCommand(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int)
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(v)
	}
	return out
}

// TestWaitReplicasOnCluster: on a Cluster of three masters with a replica
// each, WaitReplicas 1 works for keys on every shard, and each WAIT runs
// on the master that ran the script before it: on every master, as many
// WAITs as scripts. Replication reports synchronous for every shard.
func TestWaitReplicasOnCluster(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	cl := testenv.StartRedisClusterReplicas(t)
	// Every master has its replica online before the first WAIT.
	masters := map[string]bool{}
	deadline := time.Now().Add(time.Minute)
	for _, addr := range cl.Addrs() {
		for {
			info, err := testenv.RedisInfo(addr, "replication")
			if err == nil && (info["role"] == "slave" || strings.Contains(info["slave0"], "state=online")) {
				masters[addr] = info["role"] == "master"
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no online replica: %v %v", addr, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cfg := &redisstore.Config{Prefix: testenv.Name("idemc") + ":", WaitReplicas: 1}
	var (
		s   *redisstore.Store
		err error
	)
	if suiteClient == testenv.RueidisKind {
		s, err = redisstore.NewRueidis(redistest.Rueidis(t, cl.Addrs()...), cfg)
	} else {
		s, err = redisstore.New(redistest.GoRedisCluster(t, cl.Addrs()...), cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]map[string]int{}
	for addr, m := range masters {
		if m {
			before[addr] = cmdCalls(t, addr)
		}
	}
	for range 60 {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
			t.Fatal(err)
		}
	}
	for addr, b := range before {
		a := cmdCalls(t, addr)
		scripts := a["evalsha"] + a["eval"] - b["evalsha"] - b["eval"]
		waits := a["wait"] - b["wait"]
		if scripts == 0 || waits != scripts {
			t.Errorf("master %s ran %d scripts and %d WAITs; want as many WAITs as scripts, and some", addr, scripts, waits)
		}
	}
	r, err := s.Replication(ctx)
	if err != nil || r.Mode != idem.ReplicationSynchronous || r.Replicas != 1 || r.Waits != 1 {
		t.Fatalf("Replication = %+v, %v; want synchronous, 1 replica, 1 waited for", r, err)
	}
}
