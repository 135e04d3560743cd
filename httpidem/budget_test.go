package httpidem

import (
	"bytes"
	"compress/gzip"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func gzipOf(t *testing.T, n int) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(make([]byte, n))
	zw.Close()
	return b.String()
}

// TestBudgetRefusesWhatCannotFit: a gzip body that decodes past the whole
// budget is 413, a body that finds the budget held by another request is
// 503 memory-budget with Retry-After; nothing is recorded for either, and
// every byte is given back afterwards.
func TestBudgetRefusesWhatCannotFit(t *testing.T) {
	t.Parallel()
	b := NewMemoryBudget(1<<20, -1) // 1 MiB, no wait
	e := newEnv(t, &Config{Budget: b, JSONFingerprint: true}, nil)
	w := e.do("POST", "/x", "bomb", gzipOf(t, 2<<20), "Content-Encoding", "gzip")
	problemOf(t, w, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge)
	// JSON work is charged too: a 400 KiB JSON body costs more than 1 MiB.
	wide := "[" + strings.Repeat("0,", 200<<10) + "0]"
	problemOf(t, e.do("POST", "/x", "wide", wide), http.StatusRequestEntityTooLarge, ProblemBodyTooLarge)
	// The budget held by someone else: 503 with Retry-After.
	hold := &charge{b: b, ctx: t.Context()}
	if !hold.take(900 << 10) {
		t.Fatal("could not take 900 KiB of an empty 1 MiB budget")
	}
	w = e.do("POST", "/x", "busy", gzipOf(t, 100<<10), "Content-Encoding", "gzip")
	problemOf(t, w, http.StatusServiceUnavailable, ProblemBusy)
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("503 memory-budget without Retry-After")
	}
	hold.done()
	for _, k := range []string{"bomb", "wide", "busy"} {
		if _, err := e.record("", k); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("a record exists for %q, refused for the memory budget", k)
		}
	}
	if e.calls.Load() != 0 {
		t.Fatalf("the handler ran %d times", e.calls.Load())
	}
	if w := e.do("POST", "/x", "busy", gzipOf(t, 100<<10), "Content-Encoding", "gzip"); w.Code != http.StatusCreated {
		t.Fatalf("the retry once the budget is free: %d %s", w.Code, w.Body)
	}
	if n := b.InUse(); n != 0 {
		t.Fatalf("%d bytes still charged after every request ended", n)
	}
}

// TestBudgetSharedUnderLoad: two middlewares share one budget under many
// concurrent requests; at no time is more charged than the limit, and
// everything is given back.
func TestBudgetSharedUnderLoad(t *testing.T) {
	t.Parallel()
	b := NewMemoryBudget(2<<20, 0)
	envs := []*env{newEnv(t, &Config{Budget: b}, nil), newEnv(t, &Config{Budget: b, JSONFingerprint: true}, nil)}
	body := `{"amount":"` + strings.Repeat("9", 100<<10) + `"}`
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			w := envs[i%2].do("POST", "/x", "k-"+strconv.Itoa(i), body)
			if w.Code != http.StatusCreated && w.Code != http.StatusServiceUnavailable {
				t.Errorf("request %d: %d %s", i, w.Code, w.Body)
			}
			if n := b.InUse(); n > b.Limit() {
				t.Errorf("%d bytes charged to a %d-byte budget", n, b.Limit())
			}
		})
	}
	wg.Wait()
	if n := b.InUse(); n != 0 {
		t.Fatalf("%d bytes still charged", n)
	}
}

// TestBudgetWaitersWakeWhenGiven: takes that wait for room (the budget
// held by another request) all get their bytes once the holder gives
// them back, however long their wait: a lost wake-up would leave them
// waiting for the hour and fail the test by its timeout.
func TestBudgetWaitersWakeWhenGiven(t *testing.T) {
	t.Parallel()
	b := NewMemoryBudget(1000, time.Hour)
	hold := &charge{b: b, ctx: t.Context()}
	if !hold.take(1000) {
		t.Fatal("could not take the whole of an empty budget")
	}
	const waiters = 4
	got := make(chan bool, waiters)
	for range waiters {
		go func() {
			c := &charge{b: b, ctx: t.Context()}
			ok := c.take(250)
			got <- ok
		}()
	}
	// Give back only once a take is waiting, so that the wake-up, not
	// the first check, is what lets it through.
	for {
		b.mu.Lock()
		waiting := b.freed != nil
		b.mu.Unlock()
		if waiting {
			break
		}
		runtime.Gosched()
	}
	hold.done()
	for range waiters {
		if !<-got {
			t.Fatal("a waiting take failed after the budget was given back")
		}
	}
	if n := b.InUse(); n != 1000 {
		t.Fatalf("%d bytes charged; want the four waiters' 1000", n)
	}
}
