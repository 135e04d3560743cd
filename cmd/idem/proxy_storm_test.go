package main

import (
	"context"
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

// TestE2EStormAtMostOnce: three idem proxy processes on one PostgreSQL
// schema, one of them SIGKILLed (and restarted) about every second, while
// clients retry their keys through whichever proxy is up. In hold mode:
//   - the service executes each key at most once;
//   - every key ends replaying its success or replaying outcome-unknown
//     (a takeover found the claim marked as forwarded by a killed proxy);
//   - once a lease has passed after the last kill, no key is in flight.
func TestE2EStormAtMostOnce(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.PostgresDB(t)
	var mu sync.Mutex
	executions := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := httpidem.ParseKey(r.Header.Get("Idempotency-Key"))
		io.ReadAll(r.Body)
		mu.Lock()
		executions[id]++
		n := executions[id]
		mu.Unlock()
		time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond) // a window for the kills
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %s #%d", id, n)
	}))
	defer up.Close()

	const lease = time.Second
	args := []string{"--upstream", up.URL, "--store", dsn, "--lease", lease.String()}
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
					if a.err == nil && (a.status == 201 || (a.status >= 502 && strings.Contains(a.body, "outcome-unknown"))) {
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
	t.Logf("%d kills; %d keys, %d held as outcome-unknown, none executed twice", kills.Load(), keys, held)
}

func sendWith(cl *http.Client, base, key, body string) answer {
	r, err := http.NewRequestWithContext(context.Background(), "POST", base+"/charges", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Authorization", "Bearer storm")
	resp, err := cl.Do(r)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get("Idempotent-Replayed") == "true", header: resp.Header, err: err}
}
