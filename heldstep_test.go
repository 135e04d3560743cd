package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/memstore"
)

func TestHeldStepResult(t *testing.T) {
	t.Parallel()
	h := idem.HeldStep{Name: "charge", Finished: []string{"reserve", "<b>ship</b>\x00"}}
	res := idem.OutcomeUnknownStepResult(h)
	got, ok := idem.HeldStepOf(res)
	if !ok || got.Name != h.Name || strings.Join(got.Finished, "|") != strings.Join(h.Finished, "|") {
		t.Fatalf("HeldStepOf(%q) = %+v, %v", res, got, ok)
	}
	if !idem.IsOutcomeUnknownResult(res) || !idem.IsOutcomeUnknownResult(idem.OutcomeUnknownResult()) {
		t.Fatal("an outcome-unknown result is not recognised")
	}
	// Do's result of earlier releases names no step; other bytes are
	// neither held nor a step.
	for _, r := range [][]byte{idem.OutcomeUnknownResult(), testenv.GoldenHeldResult("held_do"), testenv.GoldenHeldResult("held_http"),
		[]byte(`{"step":"charge"}`), append(idem.OutcomeUnknownResult(), " step {"...), append(idem.OutcomeUnknownResult(), ` step {"step":""}`...)} {
		if h, ok := idem.HeldStepOf(r); ok {
			t.Errorf("HeldStepOf(%q) = %+v, want none", r, h)
		}
	}
	if idem.IsOutcomeUnknownResult([]byte(`{"step":"charge"}`)) || idem.IsOutcomeUnknownResult(idem.NotReplayableResult()) {
		t.Error("a result that is not Do's outcome-unknown one is recognised as one")
	}
	// The finished steps are bounded: the last MaxHeldFinished.
	var many []string
	for i := range idem.MaxHeldFinished + 5 {
		many = append(many, fmt.Sprint("s", i))
	}
	got, _ = idem.HeldStepOf(idem.OutcomeUnknownStepResult(idem.HeldStep{Name: "x", Finished: many}))
	if len(got.Finished) != idem.MaxHeldFinished || got.Finished[0] != "s5" {
		t.Fatalf("finished kept: %v", got.Finished)
	}
	// The encoding is pinned: records outlive the process.
	testenv.Golden(t, "testdata/golden/held-step-v1.txt", append(res, '\n'))
}

// A key held in a step replays as outcome-unknown to Do, and a resolution
// with that result (which would settle nothing) is refused.
func TestHeldStepReplayAndResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New(nil)
	t.Cleanup(func() { s.Close() })
	key := idem.MustKey("t", "k")
	c, err := s.Begin(ctx, idem.BeginRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	res := idem.OutcomeUnknownStepResult(idem.HeldStep{Name: "charge"})
	if err := s.Hold(ctx, c.Owner, res); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.Do(ctx, s, key, nil, func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("Do on a key held in a step: %v", err)
	}
	err = idem.Resolve(ctx, s, idem.Resolution{Digest: key.Digest(), Fence: c.Owner.Fence, Result: res})
	var ce *idem.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("resolving with a held-step result: %v", err)
	}
}
