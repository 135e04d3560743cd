package redistoken_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/redistoken"
	"github.com/idemkit/idem/onetime/tokentest"
)

// TestConformanceSentinel runs the suite on a store that finds its master
// through a Redis Sentinel, through each client.
func TestConformanceSentinel(t *testing.T) {
	sn := testenv.StartRedisSentinel(t)
	for _, kind := range []string{"go-redis", "rueidis"} {
		t.Run(kind, func(t *testing.T) {
			tokentest.Run(t, tokentest.Harness{
				New: func(t *testing.T, retain time.Duration) onetime.Store {
					cfg := &redistoken.Config{Prefix: testenv.Name("idemt") + ":", Retain: retain}
					var (
						s   *redistoken.Store
						err error
					)
					if kind == "rueidis" {
						s, err = redistoken.NewRueidis(sn.Rueidis(t), cfg)
					} else {
						s, err = redistoken.New(sn.GoRedis(t), cfg)
					}
					if err != nil {
						t.Fatal(err)
					}
					return s
				},
				NativeExpiry: true,
			})
		})
	}
}
