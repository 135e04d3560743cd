package connectidem_test

import (
	"strconv"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/idemkit/idem/connectidem"
	"github.com/idemkit/idem/internal/rpcidem/observetest"
)

func TestObserverDecisions(t *testing.T) {
	t.Parallel()
	const work = "decide+ decide-acquired work+ work- complete+ complete-"
	for _, c := range []struct {
		name, key, body string
		prepare         string // a call with this body first, unobserved
		decided, phases string
	}{
		{"executed", "k", "a", "", "acquired/0 executed/0", work},
		{"replayed", "k", "a", "a", "replayed/0/replayed", "decide+ decide-replayed"},
		{"mismatch", "k", "a", "b", "mismatch/9", "decide+ decide-mismatch"},
		{"stored error", "k", "e", "", "acquired/0 executed/3", work},
		{"released", "k", "u", "", "acquired/0 released/14", work},
		{"keyless", "", "a", "", "keyless/0", ""},
		{"rejected", `"unterminated`, "a", "", "rejected/3", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec := observetest.New(t)
			e := start(t, &connectidem.Config{Observer: rec})
			if c.prepare != "" {
				if _, err := call(e, c.key, "alice", c.prepare); err != nil {
					t.Fatal(err)
				}
				rec.Reset()
			}
			_, _ = call(e, c.key, "alice", c.body)
			if got := rec.Decisions(); got != c.decided {
				t.Errorf("decisions %q, want %q", got, c.decided)
			}
			if got := rec.Phases(); got != c.phases {
				t.Errorf("phases %q, want %q", got, c.phases)
			}
			for _, ev := range rec.Events() {
				if ev.Method != procedure || (ev.Key() != "") != (c.phases != "") {
					t.Errorf("event %+v", ev)
				}
			}
		})
	}
}

// Duplicates while the first call runs: exactly one executed, every other
// call in flight, each with one final decision.
func TestObserverDuplicates(t *testing.T) {
	t.Parallel()
	const dups = 12
	rec := observetest.New(t)
	e := start(t, &connectidem.Config{Observer: rec})
	var wg sync.WaitGroup
	var refused sync.WaitGroup
	refused.Add(dups - 1)
	codes := make([]connect.Code, dups)
	for i := range dups {
		wg.Go(func() {
			_, err := call(e, "dup", "alice", "slow")
			codes[i] = connect.CodeOf(err)
			if err != nil {
				refused.Done()
			}
		})
	}
	refused.Wait() // every duplicate answered while the first still runs
	close(e.gate)
	wg.Wait()
	got := map[string]int{}
	for _, ev := range rec.Events() {
		got[ev.Decision.String()+"/"+strconv.Itoa(ev.Status)]++
	}
	want := map[string]int{"acquired/0": 1, "executed/0": 1, "in_flight/10": dups - 1}
	if len(got) != len(want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("decisions %v, want %v", got, want)
		}
	}
	if n := e.count("slow"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}
