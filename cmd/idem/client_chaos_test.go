package main

// idemclient against the real idem proxy through a TCP fault proxy in both
// directions (issue 23 §3): the client half and the server half together,
// on a bad network.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/testenv"
)

// chaos switches faults on p at random until stop is closed: black holes,
// replies dropped, connections reset (now, or in mid-reply) and latency,
// each for a few tens of milliseconds, with passing stretches between.
// It returns a func that waits for it to stop and leaves p passing.
func chaos(p *testenv.FaultProxy, seed uint64, stop <-chan struct{}) (wait func() map[string]int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	counts := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fault := "pass"
			switch x := rng.IntN(100); {
			case x < 8:
				fault = "black-hole"
				p.Set(testenv.BlackHole)
			case x < 16:
				fault = "drop-replies"
				p.Set(testenv.DropReplies)
			case x < 24:
				fault = "reset"
				p.ResetAll()
			case x < 30:
				fault = "cut-reply"
				p.CutNextReply(rng.IntN(64))
			case x < 36:
				fault = "drop-next-reply"
				p.DropNextReply()
			case x < 46:
				fault = "latency"
				p.SetLatency(time.Duration(rng.IntN(30)) * time.Millisecond)
			}
			counts[fault]++
			select {
			case <-stop:
				p.Set(testenv.Pass)
				p.SetLatency(0)
				return
			case <-time.After(time.Duration(10+rng.IntN(50)) * time.Millisecond):
			}
			p.Set(testenv.Pass)
			p.SetLatency(0)
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(10+rng.IntN(40)) * time.Millisecond):
			}
		}
	}()
	return func() map[string]int { <-done; return counts }
}

// chaosRig is a counting upstream, behind a fault proxy, behind a real idem
// proxy (hold mode, memory store), behind a second fault proxy that the
// clients talk to.
type chaosRig struct {
	up       *upstream
	upFault  *testenv.FaultProxy
	proxy    *proxy
	cliFault *testenv.FaultProxy
	base     string // the clients' URL: through cliFault
}

func newChaosRig(t *testing.T, upstreamTimeout string) *chaosRig {
	t.Helper()
	r := &chaosRig{up: newUpstream(t)}
	u, _ := url.Parse(r.up.srv.URL)
	r.upFault = testenv.NewFaultProxy(t, u.Host)
	r.proxy = startProxy(t, "--upstream", "http://"+r.upFault.Addr(), "--store", "memory:",
		"--upstream-timeout", upstreamTimeout, "--read-timeout", "5s", "--log-level", "error")
	pu, _ := url.Parse(r.proxy.url)
	r.cliFault = testenv.NewFaultProxy(t, pu.Host)
	r.base = "http://" + r.cliFault.Addr()
	return r
}

// TestClientChaos: 2,000 logical operations from concurrent clients, with
// faults on both links. Every operation ends with its success or the
// typed outcome-unknown error; effects = successes + the outcome-unknown
// operations that reached the service; no key has two effects.
func TestClientChaos(t *testing.T) {
	t.Parallel()
	rig := newChaosRig(t, "1500ms")
	const ops, workers = 2000, 40

	budget, err := idemclient.NewBudget(1, 200)
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int64
	base := &http.Transport{MaxIdleConnsPerHost: workers}
	defer base.CloseIdleConnections()
	tr, err := idemclient.New(&idemclient.Config{
		Transport:      base,
		MaxAttempts:    40,
		MaxElapsed:     40 * time.Second,
		AttemptTimeout: time.Second,
		BaseDelay:      20 * time.Millisecond,
		MaxDelay:       400 * time.Millisecond,
		Budget:         budget,
		Observer: idemclient.ObserverFunc(func(_ context.Context, e idemclient.Event) {
			if e.Kind == idemclient.EventAttempt {
				attempts.Add(1)
			}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}

	stop := make(chan struct{})
	waitDown := chaos(rig.cliFault, 1, stop)
	waitUp := chaos(rig.upFault, 2, stop)

	type result struct {
		key      string
		ok       bool
		replayed bool
		unknown  bool
		err      error
	}
	results := make([]result, ops)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= ops {
					return
				}
				body := fmt.Sprintf(`{"op":%d}`, i)
				req, _ := http.NewRequest(http.MethodPost, rig.base+"/charges", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer chaos")
				resp, err := client.Do(req)
				var ou *idemclient.OutcomeUnknownError
				switch {
				case err == nil:
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					results[i] = result{key: idemclient.Key(resp), replayed: idemclient.Replayed(resp)}
					if rerr == nil && resp.StatusCode == http.StatusCreated && strings.Contains(string(b), fmt.Sprintf(`"body":%q`, body)) {
						results[i].ok = true
					} else {
						results[i].err = fmt.Errorf("answer %d %q (%v)", resp.StatusCode, b, rerr)
					}
				case errors.As(err, &ou):
					results[i] = result{key: ou.Key, unknown: true, err: err}
				default:
					results[i] = result{err: err}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	downFaults, upFaults := waitDown(), waitUp()

	var successes, unknown, unknownReached, replays int
	var effects int
	seen := map[string]bool{}
	for i, r := range results {
		switch {
		case r.ok:
			successes++
			if r.replayed {
				replays++
			}
			if n := rig.up.count(r.key); n != 1 {
				t.Errorf("op %d succeeded with %d effects (key %s)", i, n, r.key)
			}
		case r.unknown:
			unknown++
			n := rig.up.count(r.key)
			if n > 1 {
				t.Errorf("op %d (outcome unknown) has %d effects", i, n)
			}
			unknownReached += n
		default:
			t.Errorf("op %d ended with neither success nor outcome-unknown: %v", i, r.err)
		}
		if seen[r.key] {
			t.Errorf("op %d: key %q used by two operations", i, r.key)
		}
		seen[r.key] = true
	}
	rig.up.mu.Lock()
	duplicates := 0
	for _, n := range rig.up.calls {
		effects += n
		if n > 1 {
			duplicates += n - 1
		}
	}
	rig.up.mu.Unlock()
	t.Logf("chaos: %d ops, %d successes (%d replays), %d outcome-unknown (%d reached the service), %d effects, %d duplicates, %d attempts (%.2f per op); faults client side %v, upstream side %v",
		ops, successes, replays, unknown, unknownReached, effects, duplicates, attempts.Load(), float64(attempts.Load())/ops, downFaults, upFaults)
	if effects != successes+unknownReached || duplicates != 0 {
		t.Fatalf("effects %d ≠ successes %d + reached outcome-unknown %d, or duplicates %d", effects, successes, unknownReached, duplicates)
	}
	if replays == 0 || attempts.Load() == ops {
		t.Fatalf("no retry was needed (%d attempts, %d replays): the faults did not bite", attempts.Load(), replays)
	}
}

// TestClientOutageAmplification: during a total outage of the proxy
// (connections refused, then black-holed), attempts ÷ requests stays
// within the budget's bound, (1 + ratio) + capacity ÷ requests.
func TestClientOutageAmplification(t *testing.T) {
	t.Parallel()
	rig := newChaosRig(t, "5s")
	for _, tc := range []struct {
		fault    testenv.Fault
		requests int
		timeout  time.Duration
	}{
		{testenv.Refuse, 2000, time.Second},
		{testenv.BlackHole, 300, 100 * time.Millisecond},
	} {
		rig.cliFault.Set(tc.fault)
		var attempts atomic.Int64
		base := &http.Transport{}
		tr, err := idemclient.New(&idemclient.Config{
			Transport:      base,
			AttemptTimeout: tc.timeout,
			BaseDelay:      time.Millisecond,
			MaxDelay:       10 * time.Millisecond,
			Observer: idemclient.ObserverFunc(func(_ context.Context, e idemclient.Event) {
				if e.Kind == idemclient.EventAttempt {
					attempts.Add(1)
				}
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: tr}
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 20 {
			wg.Go(func() {
				for next.Add(1) <= int64(tc.requests) {
					req, _ := http.NewRequest(http.MethodPost, rig.base+"/charges", strings.NewReader("{}"))
					req.Header.Set("Authorization", "Bearer outage")
					if resp, err := client.Do(req); err == nil {
						resp.Body.Close()
					} else {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		base.CloseIdleConnections()
		rig.cliFault.Set(testenv.Pass)
		ratio := float64(attempts.Load()) / float64(tc.requests)
		bound := 1 + idemclient.DefaultBudgetRatio + idemclient.DefaultBudgetCapacity/float64(tc.requests)
		t.Logf("outage %v: %d requests, %d attempts, %.3f attempts per request (bound %.3f), %d failed", tc.fault, tc.requests, attempts.Load(), ratio, bound, failed.Load())
		if ratio > bound || failed.Load() != int64(tc.requests) {
			t.Errorf("outage %v: %.3f attempts per request, bound %.3f; %d of %d failed", tc.fault, ratio, bound, failed.Load(), tc.requests)
		}
	}
	if n := len(rig.up.calls); n != 0 {
		t.Errorf("%d keys reached the service during the outage", n)
	}
}
