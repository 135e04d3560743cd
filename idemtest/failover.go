package idemtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// FailoverTopology is a replicated store that RunFailover can fail over:
// a primary, a standby that a failover promotes, and a way to point the
// clients at the promoted server.
type FailoverTopology struct {
	// Store reaches the current primary. The rig opens it once, through a
	// client-side TCP forwarder whose target it switches to the promoted
	// server at each failover (as an operator's virtual IP / HA proxy
	// would), so the same Store works before and after.
	Store idem.Store

	// Failover cuts the standby off from the primary for a moment (a real
	// TCP forwarder that stops forwarding), then SIGKILLs the primary,
	// promotes the standby, switches the clients, and returns once the
	// store answers on the new primary AND a replacement standby is
	// attached again (so the next failover has one to promote).
	Failover func(t *testing.T)
}

// FailoverOptions tunes RunFailover.
type FailoverOptions struct {
	Callers    int           // concurrent callers of idem.Do; 0 means 8
	Failovers  int           // 0 means 3
	AtMostOnce bool          // run every Do with idem.AtMostOnce
	Between    time.Duration // traffic before and between failovers; 0 means 1s
}

// FailoverReport is what RunFailover counted.
type FailoverReport struct {
	// Ops is the number of keys the callers tried, one idem.Do each.
	Ops int
	// Acknowledged is the number of those whose Do returned fn's result
	// without an error: results a caller was given.
	Acknowledged int
	// Lost is the number of acknowledged keys whose retry after the last
	// failover did not replay the result the caller was given, byte for
	// byte.
	Lost int
	// RunTwice is the number of acknowledged keys whose fn ran again and,
	// with AtMostOnce, also of keys never acknowledged whose fn ran more
	// than once.
	RunTwice int
}

// Failover timing. The lease is short so that a claim whose holder lost
// its store in the failover frees itself quickly for the retries; it is
// still long against one operation on a loaded machine, and Do renews it
// while fn runs.
const (
	failoverLease    = 3 * time.Second
	failoverOpLimit  = 10 * time.Second // context deadline of one Do
	failoverPhaseMax = 90 * time.Second // for a phase to see an acknowledged op
	failoverRetryMax = 3 * time.Minute  // for every key's retry to answer
)

// RunFailover runs a stream of idem.Do calls against topo.Store through
// opt.Failovers failovers of its server, then retries every key, and
// reports the results that callers had been given and that the failovers
// lost, and the keys whose fn ran twice.
//
// opt.Callers goroutines call Do on fresh keys (one per call) for
// opt.Between before the first failover, between failovers and after the
// last, and while each Failover runs. fn counts its executions per key and
// returns a random nonce; a Do that returned the nonce without an error is
// acknowledged. Store errors while the topology fails over are expected:
// the caller gets an error, and the key is retried at the end like every
// other. Each phase lasts until at least one call was acknowledged in it
// (so a store that never comes back after a failover fails the suite).
//
// After the last failover, every key is retried with Do (Options.Wait set,
// so that a claim left by a holder that died waits for its lease) until
// its retry answers. The report counts:
//
//   - Lost: acknowledged keys whose retry did not replay their nonce (a
//     different nonce because fn ran again, ErrOutcomeUnknown, or no
//     answer at all within minutes);
//   - RunTwice: acknowledged keys whose fn ran again; with AtMostOnce,
//     also every key whose fn ran more than once.
//
// RunFailover fails the test (t.Errorf) when Lost or RunTwice is not zero
// or a phase saw no acknowledged call, logs the report, and returns it. On
// an asynchronously replicated server it is expected to fail: that is what
// it measures.
//
// Nothing here stops a split brain: the topology's Failover must fence the
// old primary (kill it) before it switches the clients, as an HA manager
// must (docs/replication.md).
func RunFailover(t *testing.T, topo FailoverTopology, opt FailoverOptions) FailoverReport {
	t.Helper()
	if topo.Store == nil || topo.Failover == nil {
		t.Fatal("idemtest: FailoverTopology.Store and Failover are required")
	}
	if opt.Callers <= 0 {
		opt.Callers = 8
	}
	if opt.Failovers <= 0 {
		opt.Failovers = 3
	}
	if opt.Between <= 0 {
		opt.Between = time.Second
	}
	r := &failoverRun{t: t, s: topo.Store, opt: opt, run: randomHex(6), runs: make(map[idem.Key]int), acks: make(map[idem.Key]string)}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range opt.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.call(stop)
		}()
	}
	stopped := false
	stopCallers := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopCallers() // also when Failover calls t.Fatal

	for i := 0; i <= opt.Failovers; i++ {
		phase := "before the first failover"
		if i > 0 {
			start := time.Now()
			topo.Failover(t)
			t.Logf("failover %d done in %v", i, time.Since(start).Round(time.Millisecond))
			phase = fmt.Sprintf("after failover %d", i)
		}
		r.phase(phase)
	}
	stopCallers()

	rep := r.retryAll()
	t.Logf("failover suite (%d callers, %d failovers, AtMostOnce %v): %d ops, %d acknowledged, %d lost, %d run twice; %d calls failed while the topology failed over (expected)%s",
		opt.Callers, opt.Failovers, opt.AtMostOnce, rep.Ops, rep.Acknowledged, rep.Lost, rep.RunTwice, r.failed, r.errSample())
	if rep.Lost > 0 || rep.RunTwice > 0 {
		t.Errorf("across %d failovers, %d of %d acknowledged results were lost and %d keys ran twice: the store acknowledged records its standby did not have (is the replication synchronous? docs/replication.md)",
			opt.Failovers, rep.Lost, rep.Acknowledged, rep.RunTwice)
	}
	return rep
}

type failoverRun struct {
	t   *testing.T
	s   idem.Store
	opt FailoverOptions
	run string // distinguishes this run's keys from any earlier run's

	mu     sync.Mutex
	keys   []idem.Key
	runs   map[idem.Key]int    // fn executions per key
	acks   map[idem.Key]string // acknowledged nonce per key
	failed int                 // Do calls that returned an error
	errs   map[string]int      // a sample of their messages
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *failoverRun) options(wait bool) *idem.Options {
	return &idem.Options{
		Fingerprint: fp("failover"),
		Lease:       failoverLease,
		Retention:   time.Hour,
		AtMostOnce:  r.opt.AtMostOnce,
		Wait:        wait,
	}
}

// fn is the work of every key: it counts its executions and returns a
// nonce that no other execution returns.
func (r *failoverRun) fn(key idem.Key) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		r.mu.Lock()
		r.runs[key]++
		r.mu.Unlock()
		return randomHex(16), nil
	}
}

// call runs Do on fresh keys until stop is closed.
func (r *failoverRun) call(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		r.mu.Lock()
		key := idem.MustKey("failover", fmt.Sprintf("%s-%d", r.run, len(r.keys)))
		r.keys = append(r.keys, key)
		r.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), failoverOpLimit)
		v, err := idem.Do(ctx, r.s, key, r.options(false), r.fn(key))
		cancel()
		r.mu.Lock()
		if err == nil {
			r.acks[key] = v
		} else {
			r.failed++
			r.noteErr(err)
		}
		r.mu.Unlock()
		if err != nil {
			// The store is failing over: do not spin on a refused port.
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// noteErr keeps a small sample of error messages for the log. r.mu is held.
func (r *failoverRun) noteErr(err error) {
	if r.errs == nil {
		r.errs = make(map[string]int)
	}
	msg := err.Error()
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	if _, ok := r.errs[msg]; ok || len(r.errs) < 5 {
		r.errs[msg]++
	}
}

func (r *failoverRun) errSample() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return ""
	}
	msgs := make([]string, 0, len(r.errs))
	for m, n := range r.errs {
		msgs = append(msgs, fmt.Sprintf("\n\t%d× %s", n, m))
	}
	sort.Strings(msgs)
	return "; for example:" + fmt.Sprint(msgs)
}

// phase lets the callers run for opt.Between and until one call made in
// the phase was acknowledged.
func (r *failoverRun) phase(name string) {
	r.t.Helper()
	r.mu.Lock()
	first := len(r.keys)
	r.mu.Unlock()
	start := time.Now()
	time.Sleep(r.opt.Between)
	for {
		r.mu.Lock()
		acked := 0
		for _, k := range r.keys[first:] {
			if _, ok := r.acks[k]; ok {
				acked++
			}
		}
		r.mu.Unlock()
		if acked > 0 {
			return
		}
		if time.Since(start) > failoverPhaseMax {
			r.t.Errorf("%s: no call was acknowledged in %v: the store did not answer%s", name, failoverPhaseMax, r.errSample())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// retryAll retries every key until its retry answers and counts the
// report. The retries run on opt.Callers goroutines.
func (r *failoverRun) retryAll() FailoverReport {
	r.t.Helper()
	r.mu.Lock()
	keys := append([]idem.Key(nil), r.keys...)
	r.mu.Unlock()

	type answer struct {
		value    string
		err      error
		answered bool
	}
	answers := make([]answer, len(keys))
	deadline := time.Now().Add(failoverRetryMax)
	next := make(chan int)
	var wg sync.WaitGroup
	for range r.opt.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for {
					ctx, cancel := context.WithTimeout(context.Background(), failoverOpLimit)
					v, err := idem.Do(ctx, r.s, keys[i], r.options(true), r.fn(keys[i]))
					cancel()
					if err == nil || errors.Is(err, idem.ErrOutcomeUnknown) || errors.Is(err, idem.ErrNotReplayable) || errors.Is(err, idem.ErrMismatch) {
						answers[i] = answer{value: v, err: err, answered: true}
						break
					}
					// Unavailable, or still in flight: a holder that died in
					// a failover keeps its claim until its lease runs out.
					answers[i].err = err
					if time.Now().After(deadline) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	rep := FailoverReport{Ops: len(keys), Acknowledged: len(r.acks)}
	unanswered := 0
	for i, k := range keys {
		a := answers[i]
		nonce, acked := r.acks[k]
		if !a.answered {
			unanswered++
			if unanswered <= 5 {
				r.t.Errorf("key %v: no answer to its retry within %v: %v", k, failoverRetryMax, a.err)
			}
		}
		if acked {
			if !a.answered || a.err != nil || a.value != nonce {
				rep.Lost++
				if rep.Lost <= 5 {
					r.t.Errorf("key %v: the caller was given %q; its retry after the failovers got %q, %v", k, nonce, a.value, a.err)
				}
			}
			if r.runs[k] > 1 {
				rep.RunTwice++
			}
		} else if r.opt.AtMostOnce && r.runs[k] > 1 {
			rep.RunTwice++
			if rep.RunTwice <= 5 {
				r.t.Errorf("key %v (AtMostOnce, never acknowledged): fn ran %d times", k, r.runs[k])
			}
		}
	}
	if unanswered > 5 {
		r.t.Errorf("… %d keys in all got no answer", unanswered)
	}
	return rep
}
