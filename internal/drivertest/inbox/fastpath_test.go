package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemkit/idem/inbox"
)

// fakeFast is a scripted FastPath that records calls.
type fakeFast struct {
	mu       sync.Mutex
	state    inbox.FastState
	err      error
	calls    []string
	tokenSeq int
}

func (f *fakeFast) Claim(ctx context.Context, key string) (inbox.FastState, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "claim")
	if f.err != nil {
		return 0, "", f.err
	}
	if f.state == inbox.FastClaimed {
		f.tokenSeq++
		return f.state, fmt.Sprint("tok", f.tokenSeq), nil
	}
	return f.state, "", nil
}

func (f *fakeFast) Complete(ctx context.Context, key, token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "complete:"+token)
	return f.err
}

func (f *fakeFast) Release(ctx context.Context, key, token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "release:"+token)
	return f.err
}

func (f *fakeFast) log() string { f.mu.Lock(); defer f.mu.Unlock(); return fmt.Sprint(f.calls) }

func TestFastPathLayers(t *testing.T) {
	lite := backends()[2]
	cases := []struct {
		name      string
		state     inbox.FastState
		err       error
		handler   error
		wantOut   inbox.Outcome
		wantCalls string
		wantRows  int
	}{
		{"done answers without the database", inbox.FastDone, nil, nil, inbox.Duplicate, "[claim]", 0},
		{"claimed then completed", inbox.FastClaimed, nil, nil, inbox.Processed, "[claim complete:tok1]", 1},
		{"busy falls through to the database", inbox.FastBusy, nil, nil, inbox.Processed, "[claim complete:]", 1},
		{"fast path down: database alone, breaker skips the rest", 0, errors.New("connection refused"), nil, inbox.Processed, "[claim]", 1},
		{"handler failure releases the claim", inbox.FastClaimed, nil, errBusiness, 0, "[claim release:tok1]", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fast := &fakeFast{state: c.state, err: c.err}
			f := newFixture(t, lite, &inbox.Config{FastPath: fast})
			out, err := f.ib.Process(ctxT(t), "c", "m", func(ctx context.Context, tx *sql.Tx) error {
				if err := f.effect("m")(ctx, tx); err != nil {
					return err
				}
				return c.handler
			})
			if out != c.wantOut || !errors.Is(err, c.handler) {
				t.Fatalf("Process = %v, %v; want %v, %v", out, err, c.wantOut, c.handler)
			}
			if got := fast.log(); got != c.wantCalls {
				t.Errorf("calls %s, want %s", got, c.wantCalls)
			}
			if n := f.dedupRows(t); n != c.wantRows {
				t.Errorf("%d dedup rows, want %d", n, c.wantRows)
			}
			if c.err != nil && f.ib.Stats().FastPathErrors == 0 {
				t.Error("fast path errors not counted")
			}
		})
	}
}

func TestBloomSkipsFastPathForNewIDs(t *testing.T) {
	fast := &fakeFast{state: inbox.FastClaimed}
	f := newFixture(t, backends()[2], &inbox.Config{FastPath: fast, Bloom: &inbox.BloomConfig{Capacity: 1000, FalsePositiveRate: 0.0001}})
	ctx := ctxT(t)
	if out, err := f.ib.Process(ctx, "c", "m", f.effect("m")); err != nil || out != inbox.Processed {
		t.Fatal(out, err)
	}
	// "Definitely new": no claim, only the post-commit completion.
	if got := fast.log(); got != "[complete:]" {
		t.Fatalf("calls %s", got)
	}
	// "Maybe seen": the fast path is asked.
	fast.state = inbox.FastDone
	if out, err := f.ib.Process(ctx, "c", "m", f.effect("m")); err != nil || out != inbox.Duplicate {
		t.Fatal(out, err)
	}
	if got := fast.log(); got != "[complete: claim]" {
		t.Fatalf("calls %s", got)
	}
}

// TestBloomWithoutFastPath: a "maybe seen" ID is answered by one read of the
// dedup row; a false positive only costs that read and is processed normally.
func TestBloomFalsePositiveStillCorrect(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		// A tiny filter: after one add, most new IDs test "maybe seen".
		f := newFixture(t, b, &inbox.Config{Bloom: &inbox.BloomConfig{Capacity: 1, FalsePositiveRate: 0.5}})
		ctx := ctxT(t)
		if out, err := f.ib.Process(ctx, "c", "seen", f.effect("seen")); err != nil || out != inbox.Processed {
			t.Fatal(out, err)
		}
		if out, err := f.ib.Process(ctx, "c", "seen", f.effect("seen")); err != nil || out != inbox.Duplicate {
			t.Fatal(out, err)
		}
		if s := f.ib.Stats(); s.ProbeDuplicates != 1 {
			t.Fatalf("duplicate not answered by the probe read: %+v", s)
		}
		falsePositives := 0
		for i := range 20 {
			id := fmt.Sprint("new-", i)
			before := f.ib.Stats().BloomDefinitelyNew
			out, err := f.ib.Process(ctx, "c", id, f.effect(id))
			if err != nil || out != inbox.Processed {
				t.Fatalf("%s: %v, %v", id, out, err)
			}
			if f.ib.Stats().BloomDefinitelyNew == before {
				falsePositives++
			}
			if n := f.effectsOf(t, id); n != 1 {
				t.Fatalf("%s: %d effects", id, n)
			}
		}
		if falsePositives == 0 {
			t.Fatal("the saturated filter produced no false positive; the test proves nothing")
		}
	})
}
