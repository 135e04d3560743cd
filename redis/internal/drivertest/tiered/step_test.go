package tiered_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestStepConformanceRedisPostgres: recovery points live in the durable
// store; the tiered store passes them through with the durable owner.
func TestStepConformanceRedisPostgres(t *testing.T) {
	idemtest.RunSteps(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			d, _, _ := durableOnPostgres(t)
			return newTiered(t, fastOnShared(t), d, healthy)
		},
	})
}
