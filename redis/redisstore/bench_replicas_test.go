package redisstore_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
)

// BenchmarkWaitReplicas: Begin then Complete on a new key, one caller, on
// a private master with one replica (loopback, replicating directly, no
// proxy on the link), without WAIT and with
// WaitReplicas 1, on both clients. writes/op counts the client's writes
// carrying a script (2 per op in both: WAIT rides with the script).
//
//	go test -run '^$' -bench BenchmarkWaitReplicas -count 5 ./redisstore
func BenchmarkWaitReplicas(b *testing.B) {
	master := testenv.StartRedis(b)
	replica := testenv.NewRedis(b)
	replica.ReplicaOf(master.Addr())
	replica.Start()
	testenv.WaitRedisReplica(b, master, replica)
	for _, kind := range []string{testenv.GoRedisKind, testenv.RueidisKind} {
		for _, wait := range []int{0, 1} {
			name := kind + "/no-wait"
			cfg := &redisstore.Config{AllowAsyncReplication: true}
			if wait > 0 {
				name = kind + "/WaitReplicas=1"
				cfg = &redisstore.Config{WaitReplicas: 1}
			}
			b.Run(name, func(b *testing.B) {
				d := newSwitchDialer(master.Addr())
				s := storeViaKind(b, kind, d, cfg)
				ctx := context.Background()
				keys := benchKeys(b.N + 1)
				op := func(k idem.Key) {
					c, err := s.Begin(ctx, idem.BeginRequest{Key: k, Lease: 30 * time.Second, Retention: time.Minute})
					if err != nil || c.Outcome != idem.Acquired {
						b.Fatal(c.Outcome, err)
					}
					if err := s.Complete(ctx, c.Owner, benchResult); err != nil {
						b.Fatal(err)
					}
				}
				op(keys[b.N]) // warm: connections and scripts
				d.Record(true)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					op(keys[i])
				}
				b.StopTimer()
				scripts := 0
				recorded, dials := d.Record(false)
				for _, w := range recorded {
					if bytes.Contains(bytes.ToLower([]byte(w)), []byte("evalsha")) {
						scripts++
					}
				}
				b.ReportMetric(float64(scripts)/float64(b.N), "writes/op")
				b.ReportMetric(float64(dials)/float64(b.N), "dials/op")
			})
		}
	}
}
