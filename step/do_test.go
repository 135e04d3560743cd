package step_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/step"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T) *memstore.Store {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConcurrentDuplicates: N goroutines run the same operation of three
// steps; its middle step fails (transiently) the first times it runs,
// so the claim passes from caller to caller. Every step's effect happens
// once, and every caller that gets a result gets the same one.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for round := range 5 {
		key := idem.MustKey("t", fmt.Sprintf("dup-%d", round))
		var effects [3]atomic.Int64
		var failures atomic.Int64
		op := func(ctx context.Context, op *step.Op) (string, error) {
			a, err := step.Run(ctx, op, "a", nil, func(ctx context.Context, s *step.Step) (int, error) {
				effects[0].Add(1)
				return 1, nil
			})
			if err != nil {
				return "", err
			}
			b, err := step.Run(ctx, op, "b", nil, func(ctx context.Context, s *step.Step) (int, error) {
				if failures.Add(1) <= 3 {
					return 0, errors.New("transient")
				}
				effects[1].Add(1)
				return a + 1, nil
			})
			if err != nil {
				return "", err
			}
			return step.Run(ctx, op, "c", nil, func(ctx context.Context, s *step.Step) (string, error) {
				effects[2].Add(1)
				return fmt.Sprintf("%d-%d", a, b), nil
			})
		}
		const n = 32
		var wg sync.WaitGroup
		results := make(chan string, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for {
					v, err := step.Do(ctx, s, key, &idem.Options{Wait: true, PollInterval: time.Millisecond}, op)
					if err == nil {
						results <- v
						return
					}
					if err.Error() != "transient" {
						t.Errorf("Do: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(results)
		for v := range results {
			if v != "1-2" {
				t.Errorf("result %q, want 1-2", v)
			}
		}
		for i := range effects {
			if got := effects[i].Load(); got != 1 {
				t.Errorf("round %d: step %d had its effect %d times, want once", round, i, got)
			}
		}
	}
}

// dies runs op once, as a process that dies in it would (op panics).
func dies(s step.Store, key idem.Key, op func(context.Context, *step.Op) (int, error)) {
	defer func() { _ = recover() }()
	_, _ = step.Do(context.Background(), s, key, nil, op)
}

// TestHoldUnknown: a HoldUnknown step whose holder lost its claim while
// the step ran (here: stalled past its lease, its renewals failing) is
// never run again: the next caller takes over and holds the key, naming
// the step and the step that finished before it in the held record
// (issue 38) and in every replay.
func TestHoldUnknown(t *testing.T) {
	t.Parallel()
	s := lossyExtend{newStore(t)}
	key := idem.MustKey("t", "hold")
	opts := &idem.Options{Lease: 200 * time.Millisecond}
	var calls atomic.Int64
	inStep, resume := make(chan struct{}), make(chan struct{})
	op := func(ctx context.Context, op *step.Op) (int, error) {
		if _, err := step.Run(ctx, op, "reserve", nil, func(context.Context, *step.Step) (int, error) { return 7, nil }); err != nil {
			return 0, err
		}
		return step.Run(ctx, op, "send", &step.Options{Unknown: step.HoldUnknown}, func(ctx context.Context, s *step.Step) (int, error) {
			if calls.Add(1) == 1 {
				close(inStep)
				<-resume // the call was sent; its answer is slow
			}
			return 1, nil
		})
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = step.Do(context.Background(), s, key, opts, op)
	}()
	<-inStep
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = step.Do(context.Background(), s, key, opts, op); !errors.Is(err, idem.ErrInFlight) {
			break
		}
	}
	close(resume)
	wg.Wait()
	var unknown *step.UnknownError
	if !errors.As(err, &unknown) || unknown.Step != "send" || !slices.Equal(unknown.Finished, []string{"reserve"}) || !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("takeover = %#v, want an UnknownError naming the step and the one before it", err)
	}
	if _, err = step.Do(context.Background(), s, key, opts, op); !errors.As(err, &unknown) || unknown.Step != "send" ||
		!slices.Equal(unknown.Finished, []string{"reserve"}) || !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("retry = %v, want ErrOutcomeUnknown (held) naming the step", err)
	}
	rec, err := s.Get(context.Background(), key)
	if err != nil || rec.State != idem.StateHeld {
		t.Fatalf("record %v, %v; want held", rec.State, err)
	}
	if h, ok := idem.HeldStepOf(rec.Result); !ok || h.Name != "send" || !slices.Equal(h.Finished, []string{"reserve"}) {
		t.Fatalf("held record %q names %+v, %v; want step send after reserve", rec.Result, h, ok)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the step ran %d times, want once", n)
	}
}

// TestHoldUnknownPanicResolved: a panic inside a HoldUnknown step holds
// the key at once (the call may have gone out); an operator who releases
// the held key lets the next call run the step again, and one whose step
// returned an error (no effect) is run again without a hold.
func TestHoldUnknownPanicResolved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	key := idem.MustKey("t", "hold-panic")
	calls := 0
	op := func(ctx context.Context, op *step.Op) (int, error) {
		return step.Run(ctx, op, "send", &step.Options{Unknown: step.HoldUnknown}, func(ctx context.Context, s *step.Step) (int, error) {
			calls++
			switch calls {
			case 1:
				panic("died after sending")
			case 2:
				return 0, errors.New("refused before sending")
			}
			return calls, nil
		})
	}
	dies(s, key, op)
	if _, err := step.Do(ctx, s, key, nil, op); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("retry after the panic = %v, want held", err)
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := idem.HeldStepOf(rec.Result); !ok || h.Name != "send" || h.Finished != nil {
		t.Fatalf("the record held after the panic names %+v, %v; want step send", h, ok)
	}
	if err := idem.Resolve(ctx, s, idem.Resolution{Digest: key.Digest(), Fence: rec.Fence, Release: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := step.Do(ctx, s, key, nil, op); err == nil || errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("after the release = %v, want the step's own error", err)
	}
	if v, err := step.Do(ctx, s, key, nil, op); err != nil || v != 3 {
		t.Fatalf("retry = %d, %v; want the step run a third time", v, err)
	}
}

// TestRetryUnknown: the default policy runs an unfinished step again.
func TestRetryUnknown(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	key := idem.MustKey("t", "retry")
	calls := 0
	op := func(ctx context.Context, op *step.Op) (int, error) {
		return step.Run(ctx, op, "send", nil, func(ctx context.Context, s *step.Step) (int, error) {
			calls++
			if calls == 1 {
				panic("died")
			}
			return calls, nil
		})
	}
	dies(s, key, op)
	v, err := step.Do(context.Background(), s, key, nil, op)
	if err != nil || v != 2 {
		t.Fatalf("retry = %d, %v; want 2", v, err)
	}
}

// TestCompensationReplayed: a compensation that fails releases the key;
// the retry skips the compensations that ran and runs the rest, each once.
func TestCompensationReplayed(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	key := idem.MustKey("t", "comp")
	undone := map[string]int{}
	failUndoA := true
	comp := func(name string) *step.Options {
		return &step.Options{Compensate: func(ctx context.Context, key string, result []byte) error {
			if name == "a" && failUndoA {
				failUndoA = false
				return errors.New("refund service down")
			}
			undone[name]++
			return nil
		}}
	}
	ran := map[string]int{}
	op := func(ctx context.Context, op *step.Op) (int, error) {
		for _, name := range []string{"a", "b"} {
			if _, err := step.Run(ctx, op, name, comp(name), func(ctx context.Context, s *step.Step) (int, error) {
				ran[name]++
				return 1, nil
			}); err != nil {
				return 0, err
			}
		}
		return step.Run(ctx, op, "c", nil, func(ctx context.Context, s *step.Step) (int, error) {
			ran["c"]++
			return 0, step.Permanent(errors.New("declined"))
		})
	}
	if _, err := step.Do(context.Background(), s, key, nil, op); err == nil || errors.Is(err, step.ErrFailed) {
		t.Fatalf("first = %v, want the compensation's failure", err)
	}
	_, err := step.Do(context.Background(), s, key, nil, op)
	if !errors.Is(err, step.ErrFailed) {
		t.Fatalf("retry = %v, want ErrFailed", err)
	}
	_, err = step.Do(context.Background(), s, key, nil, op)
	if !errors.Is(err, step.ErrFailed) {
		t.Fatalf("replay = %v, want ErrFailed", err)
	}
	if undone["a"] != 1 || undone["b"] != 1 {
		t.Errorf("compensations ran %v, want each once", undone)
	}
	if ran["a"] != 1 || ran["b"] != 1 || ran["c"] != 1 {
		t.Errorf("steps ran %v, want each once (the failed one is not run again)", ran)
	}
}

// lossyExtend makes every renewal fail, so that a claim lapses while its
// holder still works.
type lossyExtend struct{ *memstore.Store }

func (l lossyExtend) Extend(ctx context.Context, _ idem.Owner, _ time.Duration) error {
	return idem.StoreError(ctx, "extend", errors.New("partitioned"))
}

// TestFencedSave: an owner whose lease lapsed while its step ran cannot
// save the step once another caller took the key over and saved it.
func TestFencedSave(t *testing.T) {
	t.Parallel()
	s := lossyExtend{newStore(t)}
	key := idem.MustKey("t", "fence")
	opts := &idem.Options{Lease: 200 * time.Millisecond}
	inStep := make(chan struct{})
	resume := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var oldErr error
	go func() {
		defer wg.Done()
		_, oldErr = step.Do(context.Background(), s, key, opts, func(ctx context.Context, op *step.Op) (string, error) {
			return step.Run(ctx, op, "a", nil, func(ctx context.Context, s *step.Step) (string, error) {
				close(inStep)
				<-resume // stalls past its lease, ignoring its context
				return "old", nil
			})
		})
	}()
	<-inStep
	var v string
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		v, err = step.Do(context.Background(), s, key, opts, func(ctx context.Context, op *step.Op) (string, error) {
			return step.Run(ctx, op, "a", nil, func(ctx context.Context, s *step.Step) (string, error) { return "new", nil })
		})
		if !errors.Is(err, idem.ErrInFlight) {
			break
		}
	}
	close(resume)
	wg.Wait()
	if err != nil || v != "new" {
		t.Fatalf("new owner = %q, %v", v, err)
	}
	if !errors.Is(oldErr, idem.ErrLeaseLost) {
		t.Fatalf("old owner = %v, want ErrLeaseLost", oldErr)
	}
	got, err := step.Do(context.Background(), s, key, opts, func(ctx context.Context, op *step.Op) (string, error) { return "", errors.New("ran") })
	if err != nil || got != "new" {
		t.Fatalf("replay = %q, %v; want the new owner's result", got, err)
	}
}

// TestHTTPHandler: a handler behind httpidem's middleware reaches its
// request's steps through the request's context; a 500 releases the key
// and the retry resumes after the finished step.
func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	mw, err := httpidem.New(s, &httpidem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	failCharge := true
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op, err := step.Load(ctx, s)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		order, err := step.Run(ctx, op, "order", nil, func(ctx context.Context, s *step.Step) (string, error) {
			runs["order"]++
			return "o1", nil
		})
		if err == nil {
			_, err = step.Run(ctx, op, "charge", nil, func(ctx context.Context, s *step.Step) (string, error) {
				runs["charge"]++
				if failCharge {
					failCharge = false
					return "", errors.New("provider down")
				}
				return "c1", nil
			})
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		io.WriteString(w, order)
	}))
	var bodies []string
	for range 3 {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "k1")
		r.Header.Set("Authorization", "Bearer alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		bodies = append(bodies, fmt.Sprint(w.Code, " ", strings.TrimSpace(w.Body.String())))
	}
	if bodies[0] != "502 provider down" || bodies[1] != "200 o1" || bodies[2] != "200 o1" {
		t.Errorf("answers %q", bodies)
	}
	if runs["order"] != 1 || runs["charge"] != 2 {
		t.Errorf("runs %v, want order once, charge twice", runs)
	}
}

func TestRunRejectsNames(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	_, err := step.Do(context.Background(), s, idem.MustKey("t", "names"), nil, func(ctx context.Context, op *step.Op) (int, error) {
		for _, name := range []string{"", "!start/x", "dup", "dup"} {
			_, err := step.Run(ctx, op, name, nil, func(ctx context.Context, s *step.Step) (int, error) { return 1, nil })
			var ce *idem.ConfigError
			if name == "dup" && err == nil {
				continue
			}
			if !errors.As(err, &ce) {
				t.Errorf("Run(%q) = %v, want a ConfigError", name, err)
			}
		}
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := step.Load(context.Background(), s); err == nil {
		t.Error("Load outside a claim succeeded")
	}
}

// counting counts the recovery-point calls a store gets.
type counting struct {
	*memstore.Store
	saves, loads atomic.Int64
}

func (c *counting) SaveStep(ctx context.Context, o idem.Owner, name string, result []byte) error {
	c.saves.Add(1)
	return c.Store.SaveStep(ctx, o, name, result)
}

func (c *counting) Steps(ctx context.Context, o idem.Owner) (map[string][]byte, error) {
	c.loads.Add(1)
	return c.Store.Steps(ctx, o)
}

// TestSkippedStepsNoStoreCalls: a resumed operation loads its recovery
// points once; a skipped finished step makes no store call.
func TestSkippedStepsNoStoreCalls(t *testing.T) {
	t.Parallel()
	s := &counting{Store: newStore(t)}
	key := idem.MustKey("t", "skip")
	fail := true
	op := func(ctx context.Context, op *step.Op) (int, error) {
		sum := 0
		for i := range 5 {
			v, err := step.Run(ctx, op, fmt.Sprint("s", i), nil, func(ctx context.Context, s *step.Step) (int, error) {
				if i == 4 && fail {
					fail = false
					return 0, errors.New("transient")
				}
				return i, nil
			})
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	}
	if _, err := step.Do(context.Background(), s, key, nil, op); err == nil {
		t.Fatal("first run succeeded")
	}
	s.saves.Store(0)
	s.loads.Store(0)
	v, err := step.Do(context.Background(), s, key, nil, op)
	if err != nil || v != 10 {
		t.Fatalf("resume = %d, %v", v, err)
	}
	if s.loads.Load() != 1 || s.saves.Load() != 1 {
		t.Errorf("resume made %d loads and %d saves; want 1 load, and 1 save (the unfinished step's)", s.loads.Load(), s.saves.Load())
	}
}
