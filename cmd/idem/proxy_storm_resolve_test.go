package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/testenv"
)

// TestE2EStormResolving is TestE2EStormAtMostOnce with a service that
// answers the proxies' resolver (--resolve-url) from its own records:
// every held key is resolved, so every key ends replaying its success,
// executed exactly once.
func TestE2EStormResolving(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.PostgresDB(t)
	var mu sync.Mutex
	executions := map[string]int{}
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := httpidem.ParseKey(r.Header.Get("Idempotency-Key"))
		io.ReadAll(r.Body)
		mu.Lock()
		executions[id]++
		n := executions[id]
		mu.Unlock()
		time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond) // a window for the kills
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %s #%d", id, n)
	})
	up := httptest.NewUnstartedServer(nil)
	// The service's own records by key, for the resolver.
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/idempotency" {
			id, _ := httpidem.ParseKey(r.Header.Get("Idempotency-Key"))
			mu.Lock()
			n := executions[id]
			mu.Unlock()
			if n == 0 {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprintf(w, `{"type":%q,"status":404}`, httpidem.ProblemNeverHappened)
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "charge %s #1", id)
			return
		}
		charge.ServeHTTP(w, r)
	})
	up.Start()
	defer up.Close()

	const lease = time.Second
	args := []string{"--upstream", up.URL, "--store", dsn, "--lease", lease.String(), "--resolve-url", up.URL + "/idempotency"}
	var pmu sync.Mutex
	procs := []*proxy{startProxy(t, args...), startProxy(t, args...), startProxy(t, args...)}
	urls := func() []string {
		pmu.Lock()
		defer pmu.Unlock()
		out := make([]string, len(procs))
		for i, p := range procs {
			out[i] = p.url
		}
		return out
	}

	// The killer: SIGKILL one proxy about every second, restart it.
	const stormFor = 15 * time.Second
	var kills atomic.Int64
	var lastKill atomic.Int64
	stop := make(chan struct{})
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		end := time.After(stormFor)
		for {
			select {
			case <-stop:
				return
			case <-end:
				return
			case <-time.After(time.Duration(700+rand.IntN(600)) * time.Millisecond):
			}
			i := rand.IntN(3)
			pmu.Lock()
			victim := procs[i]
			pmu.Unlock()
			victim.kill()
			kills.Add(1)
			lastKill.Store(time.Now().UnixNano())
			np := startProxy(t, args...)
			pmu.Lock()
			procs[i] = np
			pmu.Unlock()
		}
	}()
	defer func() { close(stop); <-killerDone }()

	// The clients: each key is retried until it gets a final answer.
	const keys, workers = 120, 8
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer cl.CloseIdleConnections()
	final := make([]answer, keys)
	work := make(chan int)
	var wg sync.WaitGroup
	clientDeadline := time.Now().Add(stormFor + 15*time.Second)
	for range workers {
		wg.Go(func() {
			for k := range work {
				for attempt := 0; time.Now().Before(clientDeadline); attempt++ {
					base := urls()[rand.IntN(3)]
					a := sendWith(cl, base, fmt.Sprintf("storm-%d", k), "amount=1")
					if a.err == nil && a.status == 201 { // held keys are resolved: only a success is final
						final[k] = a
						break
					}
					time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
				}
			}
		})
	}
	for k := range keys {
		work <- k
		time.Sleep(stormFor / keys) // spread the keys over the storm
	}
	close(work)
	wg.Wait()
	close(stop)
	<-killerDone
	stop = make(chan struct{}) // for the deferred close

	if kills.Load() < 5 {
		t.Fatalf("only %d kills: the storm did not happen", kills.Load())
	}
	// A lease after the last kill, no claim of a dead proxy is left.
	if d := time.Until(time.Unix(0, lastKill.Load()).Add(lease + 200*time.Millisecond)); d > 0 {
		time.Sleep(d)
	}
	held := 0
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		id := fmt.Sprintf("storm-%d", k)
		if n := executions[id]; n > 1 {
			t.Errorf("%s executed %d times", id, n)
		}
		if final[k].status == 0 {
			t.Errorf("%s: no final answer within the clients' time", id)
			continue
		}
		mu.Unlock()
		r := sendWith(cl, urls()[k%3], id, "amount=1")
		mu.Lock()
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", id, r.err)
		case r.status == 409:
			t.Errorf("%s still in flight a lease after the last kill", id)
		case !r.replayed:
			t.Errorf("%s: %d %q not a replay", id, r.status, r.body)
		case r.status == 201:
			if executions[id] != 1 || r.body != fmt.Sprintf("charge %s #1", id) {
				t.Errorf("%s replays %q after %d executions", id, r.body, executions[id])
			}
		case r.status >= 502 && strings.Contains(r.body, "outcome-unknown"):
			held++
		default:
			t.Errorf("%s: final answer %d %q", id, r.status, r.body)
		}
	}
	if held > 0 {
		t.Errorf("%d keys still held with a resolving service", held)
	}
	t.Logf("resolving service: %d kills; %d keys, %d held, none executed twice", kills.Load(), keys, held)
}
