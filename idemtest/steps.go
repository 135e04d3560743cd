package idemtest

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/step"
)

// RunSteps runs the conformance suite of step.Store (recovery points)
// against h, whose New must return a step.Store: saves fenced by the
// owner, the first result kept, points that survive a takeover and a
// release of the same operation and never reach a new operation of the
// key, and a save racing a takeover.
func RunSteps(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("idemtest: Harness.New is required")
	}
	cases := []struct {
		name string
		run  func(t *testing.T, s step.Store)
	}{
		{"SaveLoadFirstResultKept", testStepSaveLoad},
		{"StaleOwnerCannotSave", testStepStaleOwner},
		{"SurviveReleaseAndTakeover", testStepSurvive},
		{"NoLeakIntoNewOperation", testStepNoLeak},
		{"SaveRacesTakeover", testStepRace},
		{"ConcurrentSavesOneResult", testStepConcurrentSaves},
		{"InvalidName", testStepInvalidName},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, ok := h.New(t).(step.Store)
			if !ok {
				t.Fatal("idemtest: the store does not implement step.Store")
			}
			c.run(t, st)
		})
	}
}

func mustSteps(t *testing.T, s step.Store, o idem.Owner) map[string][]byte {
	t.Helper()
	got, err := s.Steps(ctxT(t), o)
	if err != nil {
		t.Fatalf("Steps: %v", err)
	}
	return got
}

func wantSteps(t *testing.T, got map[string][]byte, want map[string]string) {
	t.Helper()
	g := make(map[string]string, len(got))
	for k, v := range got {
		g[k] = string(v)
	}
	if !maps.Equal(g, want) {
		t.Errorf("steps = %q, want %q", g, want)
	}
}

func testStepSaveLoad(t *testing.T, s step.Store) {
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Lease: time.Minute}
	o := mustBegin(t, s, req, idem.Acquired).Owner
	wantSteps(t, mustSteps(t, s, o), map[string]string{})
	for _, p := range [][2]string{{"reserve", `{"n":1}`}, {"charge", `"ch_1"`}, {"!start/x", ""}, {"reserve", `{"n":2}`}} {
		if err := s.SaveStep(ctx, o, p[0], []byte(p[1])); err != nil {
			t.Fatalf("SaveStep(%s): %v", p[0], err)
		}
	}
	wantSteps(t, mustSteps(t, s, o), map[string]string{"reserve": `{"n":1}`, "charge": `"ch_1"`, "!start/x": ""})
	if err := s.Complete(ctx, o, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveStep(ctx, o, "late", []byte("x")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("SaveStep after Complete = %v, want ErrLeaseLost", err)
	}
	forged := o
	forged.Token = idem.NewToken()
	if err := s.SaveStep(ctx, forged, "late", []byte("x")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("SaveStep by a forged owner = %v, want ErrLeaseLost", err)
	}
	if err := s.SaveStep(ctx, idem.Owner{}, "late", []byte("x")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("SaveStep by the zero owner = %v, want ErrLeaseLost", err)
	}
}

func testStepStaleOwner(t *testing.T, s step.Store) {
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Lease: shortLease, Retention: time.Hour}
	old := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.SaveStep(ctx, old, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	c := eventually(t, s, req, idem.Acquired)
	if err := s.SaveStep(ctx, old, "b", []byte("stale")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("stale SaveStep = %v, want ErrLeaseLost", err)
	}
	wantSteps(t, mustSteps(t, s, c.Owner), map[string]string{"a": "1"})
	if err := s.SaveStep(ctx, c.Owner, "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveStep(ctx, old, "c", []byte("stale")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("stale SaveStep after the new owner saved = %v, want ErrLeaseLost", err)
	}
	wantSteps(t, mustSteps(t, s, c.Owner), map[string]string{"a": "1", "b": "2"})
}

func testStepSurvive(t *testing.T, s step.Store) {
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Lease: shortLease, Retention: time.Hour}
	o := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.SaveStep(ctx, o, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, o); err != nil {
		t.Fatal(err)
	}
	o = mustBegin(t, s, req, idem.Acquired).Owner
	wantSteps(t, mustSteps(t, s, o), map[string]string{"a": "1"})
	if err := s.SaveStep(ctx, o, "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	// The holder dies; a retry takes the claim over and finds both.
	c := eventually(t, s, req, idem.Acquired)
	if !c.Takeover {
		t.Fatal("not a takeover")
	}
	wantSteps(t, mustSteps(t, s, c.Owner), map[string]string{"a": "1", "b": "2"})
	if err := s.SaveStep(ctx, c.Owner, "a", []byte("other")); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c.Owner, []byte("done")); err != nil {
		t.Fatal(err)
	}
}

func testStepNoLeak(t *testing.T, s step.Store) {
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Lease: shortLease, Retention: shortRetention}
	o := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.SaveStep(ctx, o, "a", []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveStep(ctx, o, "b", []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, o); err != nil {
		t.Fatal(err)
	}
	// The released record expires: the next Begin starts a new operation.
	deadline := time.Now().Add(waitLimit)
	for {
		rec, err := s.Get(ctx, req.Key)
		if errors.Is(err, idem.ErrNotFound) || err == nil && !rec.ExpiresAt.After(time.Now()) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("record still live after %v", waitLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the store's clock may lag this process's by its resolution
	for {
		n := mustBegin(t, s, req, idem.Acquired).Owner
		got := mustSteps(t, s, n)
		if len(got) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("a new operation of the key sees the expired one's steps %q", got)
			}
			_ = s.Release(ctx, n) // acquired a hair before the expiry: the same operation
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err := s.SaveStep(ctx, n, "a", []byte("new")); err != nil {
			t.Fatal(err)
		}
		wantSteps(t, mustSteps(t, s, n), map[string]string{"a": "new"})
		break
	}
	if _, err := s.Purge(ctx, 0, 100); err != nil {
		t.Fatal(err)
	}
}

func testStepRace(t *testing.T, s step.Store) {
	ctx := ctxT(t)
	for round := 0; round < 3; round++ {
		req := idem.BeginRequest{Key: newKey(t), Lease: shortLease, Retention: time.Hour}
		old := mustBegin(t, s, req, idem.Acquired).Owner
		var (
			wg    sync.WaitGroup
			saved []string
		)
		wg.Add(1)
		go func() { // the old owner saves until it is refused, then some more
			defer wg.Done()
			refused := 0
			for i := 0; refused < 20; i++ {
				name := fmt.Sprintf("s%d", i)
				err := s.SaveStep(ctx, old, name, []byte("old"))
				switch {
				case err == nil:
					if refused > 0 {
						t.Errorf("SaveStep by the old owner succeeded after it was refused")
					}
					saved = append(saved, name)
				case errors.Is(err, idem.ErrLeaseLost):
					refused++
				default:
					t.Errorf("SaveStep: %v", err)
					return
				}
			}
		}()
		c := eventually(t, s, req, idem.Acquired)
		got := mustSteps(t, s, c.Owner)
		wg.Wait()
		// Every save that succeeded was ordered before the takeover, so
		// the new owner sees it; none after.
		for _, name := range saved {
			if _, ok := got[name]; !ok {
				t.Errorf("round %d: step %s saved by the old owner before the takeover is missing for the new owner", round, name)
			}
		}
		if len(got) != len(saved) {
			t.Errorf("round %d: new owner sees %d steps, the old owner saved %d", round, len(got), len(saved))
		}
	}
}

func testStepConcurrentSaves(t *testing.T, s step.Store) {
	ctx := ctxT(t)
	o := mustBegin(t, s, idem.BeginRequest{Key: newKey(t), Lease: time.Minute}, idem.Acquired).Owner
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.SaveStep(ctx, o, "x", fmt.Appendf(nil, "r%d", i)); err != nil {
				t.Errorf("SaveStep: %v", err)
			}
		}()
	}
	wg.Wait()
	first := mustSteps(t, s, o)["x"]
	if len(first) == 0 {
		t.Fatal("no result stored")
	}
	for range 3 {
		if got := mustSteps(t, s, o)["x"]; string(got) != string(first) {
			t.Fatalf("step result changed from %q to %q", first, got)
		}
	}
}

func testStepInvalidName(t *testing.T, s step.Store) {
	ctx := ctxT(t)
	o := mustBegin(t, s, idem.BeginRequest{Key: newKey(t), Lease: time.Minute}, idem.Acquired).Owner
	for _, name := range []string{"", string(make([]byte, step.MaxName+1))} {
		if err := s.SaveStep(ctx, o, name, nil); err == nil {
			t.Errorf("SaveStep(%d-byte name) = nil, want an error", len(name))
		}
	}
	name := ""
	for len(name) < step.MaxName {
		name += "n"
	}
	if err := s.SaveStep(ctx, o, name, []byte("1")); err != nil {
		t.Errorf("SaveStep(%d-byte name): %v", len(name), err)
	}
	wantSteps(t, mustSteps(t, s, o), map[string]string{name: "1"})
}
