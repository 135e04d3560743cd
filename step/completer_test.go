package step_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/step"
)

// TestCompleter: an abandoned operation is finished from its recovery
// point; one that keeps failing is held after MaxAttempts, not lost.
func TestCompleter(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	abandoned, broken := idem.MustKey("t", "abandoned"), idem.MustKey("t", "broken")
	runs := map[string]int{}
	op := func(ctx context.Context, op *step.Op) (int, error) {
		id := op.Owner().Key.ID()
		for _, name := range []string{"a", "b"} {
			if _, err := step.Run(ctx, op, name, nil, func(ctx context.Context, s *step.Step) (int, error) {
				runs[id+"/"+name]++
				if id == "abandoned" && name == "b" && runs[id+"/b"] == 1 {
					panic("the caller's process dies")
				}
				if id == "broken" && name == "b" {
					return 0, errors.New("still down")
				}
				return 1, nil
			}); err != nil {
				return 0, err
			}
		}
		return 2, nil
	}
	dies(s, abandoned, op)
	c := &step.Completer[int]{Store: s, Func: op, MaxAttempts: 3,
		KeysFunc: func(context.Context) ([]idem.Key, error) { return []idem.Key{abandoned, broken}, nil }}
	var reports []step.Report
	for range 5 {
		r, err := c.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
	}
	if r := reports[0]; r.Completed != 1 || r.Errors != 1 {
		t.Errorf("first pass %+v, want 1 completed, 1 error", r)
	}
	if r := reports[3]; r.Completed != 1 || r.Held != 1 {
		t.Errorf("fourth pass %+v, want 1 completed (replayed), 1 held", r)
	}
	if runs["abandoned/a"] != 1 || runs["abandoned/b"] != 2 || runs["broken/a"] != 1 || runs["broken/b"] != 3 {
		t.Errorf("runs %v", runs)
	}
	if v, err := step.Do(ctx, s, abandoned, nil, op); err != nil || v != 2 {
		t.Errorf("the caller's retry = %d, %v; want the completer's result", v, err)
	}
	if _, err := step.Do(ctx, s, broken, nil, op); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Errorf("retry of the abandoned broken key = %v, want held", err)
	}
}
