package tiered_test

import (
	"testing"

	"github.com/idemkit/idem/idemtest"
)

// A tiered store looks digest prefixes up in its durable store.
func TestDigestsWithPrefix(t *testing.T) {
	t.Parallel()
	idemtest.RunDigestsWithPrefix(t, newTiered(t, fastOnShared(t), durableInMemory(t), nil))
}
