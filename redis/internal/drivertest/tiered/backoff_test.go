package tiered_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/tiered"
)

// TestFastBackoffForever: a FastBackoff of math.MaxInt64 skips the fast
// store for good after its first failure. The end of the backoff is kept
// in Unix nanoseconds, which end in 2262; it must saturate there, not wrap
// into the past, where the fast store would be asked on every Begin.
func TestFastBackoffForever(t *testing.T) {
	t.Parallel()
	s := newTiered(t, fastUnreachable(t), durableInMemory(t), &tiered.Config{FastBackoff: math.MaxInt64})
	ctx := ctxT(t)
	const n = 5
	var first tiered.Stats
	for i := range n {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", fmt.Sprintf("forever-%d", i))})
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("Begin = %v, %v; want the durable store's claim", c.Outcome, err)
		}
		if i == 0 {
			first = s.Stats()
		}
	}
	if st := s.Stats(); first.FastErrors == 0 || st.FastErrors != first.FastErrors || st.DurableBegins != n {
		t.Errorf("Stats after the first Begin %+v, after %d: %+v; want the fast store skipped after its first failure", first, n, st)
	}
}
