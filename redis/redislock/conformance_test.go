package redislock

import (
	"testing"
	"time"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/locktest"
)

// The behaviour every lock.Locker owes (lock/locktest), on each client.
func TestConformance(t *testing.T) {
	t.Parallel()
	locktest.Run(t, func(t *testing.T) lock.Locker {
		l, _ := newLocker(t, &Config{TTL: 2 * time.Second})
		return l
	})
}
