package httpidem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

type phaseKey struct{}

type reqIDKey struct{}

// recObs records everything an Observer is told. Its phases put their
// Phase in the context, so a test can see which phase a call happened in.
type recObs struct {
	t      *testing.T
	mu     sync.Mutex
	events []observe.Event
	ctxs   []context.Context // the context of each event
	phases []string          // "decide+", "decide-acquired", "work-201", "complete-"
	calls  []string          // "begin@decide"
}

func newRecObs(t *testing.T) *recObs { return &recObs{t: t} }

func (o *recObs) StartPhase(ctx context.Context, p idem.AttemptPhase, key string) (context.Context, func(observe.PhaseEnd)) {
	if key == "" || key == (idem.Key{}).String() {
		o.t.Errorf("phase %v started without a hashed key", p)
	}
	if parent, ok := ctx.Value(phaseKey{}).(idem.AttemptPhase); ok {
		o.t.Errorf("phase %v started inside phase %v: phases are siblings", p, parent)
	}
	o.mu.Lock()
	o.phases = append(o.phases, p.String()+"+")
	o.mu.Unlock()
	ended := 0
	return context.WithValue(ctx, phaseKey{}, p), func(e observe.PhaseEnd) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if ended++; ended > 1 {
			o.t.Errorf("phase %v ended twice", p)
		}
		s := p.String() + "-"
		switch p {
		case idem.PhaseDecide:
			s += e.Decision.String()
		case idem.PhaseWork:
			s += strconv.Itoa(e.Status)
		}
		o.phases = append(o.phases, s)
	}
}

func (o *recObs) StoreCall(ctx context.Context, c observe.StoreCall) {
	p, _ := ctx.Value(phaseKey{}).(idem.AttemptPhase)
	if c.Duration < 0 {
		o.t.Errorf("%v took %v", c.Op, c.Duration)
	}
	if (c.Op == idem.MethodComplete || c.Op == idem.MethodRelease || c.Op == idem.MethodMarkStarted) && ctx.Done() != nil {
		o.t.Errorf("%v ran on a context the client can cancel", c.Op)
	}
	o.mu.Lock()
	o.calls = append(o.calls, c.Op.String()+"@"+p.String())
	o.mu.Unlock()
}

func (o *recObs) Decided(ctx context.Context, e observe.Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.ctxs = append(o.ctxs, ctx)
	o.mu.Unlock()
}

// decisions returns the decisions recorded, with their statuses:
// "acquired/0 executed/201".
func (o *recObs) decisions() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var parts []string
	for _, e := range o.events {
		s := e.Decision.String() + "/" + strconv.Itoa(e.Status)
		if e.Replayed {
			s += "/replayed"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func (o *recObs) reset() {
	o.mu.Lock()
	o.events, o.ctxs, o.phases, o.calls = nil, nil, nil, nil
	o.mu.Unlock()
}

func (o *recObs) want(t *testing.T, decisions, phases, calls string) {
	t.Helper()
	if got := o.decisions(); got != decisions {
		t.Errorf("decisions %q, want %q", got, decisions)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if got := strings.Join(o.phases, " "); got != phases {
		t.Errorf("phases %q, want %q", got, phases)
	}
	if got := strings.Join(o.calls, " "); got != calls {
		t.Errorf("store calls %q, want %q", got, calls)
	}
}

// rawID is a key no observer may ever see.
const rawID = "raw-key-4f1c9e-never-observed"

func TestObserverDecisions(t *testing.T) {
	t.Parallel()
	hashed := idem.MustKey(testScope, rawID).String()
	cause := errors.New("upstream reset")
	type tc struct {
		name    string
		cfg     Config
		wrap    func(idem.Store) idem.Store
		handler http.HandlerFunc
		// prepare runs before the observed request, observed too, and
		// its record is cleared.
		prepare func(e *env)
		do      func(e *env) int // the observed request; returns the status seen
		decided string
		phases  string
		calls   string
		keyless bool
		err     bool
	}
	doKey := func(e *env) int { return e.do("POST", "/x", rawID, "a").Code }
	cases := []tc{{
		name: "executed", do: doKey,
		decided: "acquired/0 executed/201",
		phases:  "decide+ decide-acquired work+ work-201 complete+ complete-",
		calls:   "begin@decide complete@complete",
	}, {
		name: "replayed", prepare: func(e *env) { doKey(e) }, do: doKey,
		decided: "replayed/201/replayed", phases: "decide+ decide-replayed", calls: "begin@decide",
	}, {
		name: "mismatch", prepare: func(e *env) { doKey(e) },
		do:      func(e *env) int { return e.do("POST", "/x", rawID, "b").Code },
		decided: "mismatch/422", phases: "decide+ decide-mismatch", calls: "begin@decide",
	}, {
		name: "keyless", keyless: true,
		do:      func(e *env) int { return e.do("POST", "/x", "", "a").Code },
		decided: "keyless/0",
	}, {
		name: "rejected", keyless: true,
		do:      func(e *env) int { return e.do("POST", "/x", `"bad `+rawID, "a").Code },
		decided: "rejected/400",
	}, {
		name: "store_error", wrap: func(s idem.Store) idem.Store { return &faultyStore{Store: s, begin: errDown} }, do: doKey, err: true,
		decided: "store_error/503", phases: "decide+ decide-store_error", calls: "begin@decide",
	}, {
		name: "fail_open", cfg: Config{FailOpen: true}, err: true,
		wrap: func(s idem.Store) idem.Store { return &faultyStore{Store: s, begin: errDown} }, do: doKey,
		decided: "fail_open/0", phases: "decide+ decide-fail_open", calls: "begin@decide",
	}, {
		name: "complete fails", wrap: func(s idem.Store) idem.Store { return &faultyStore{Store: s, complete: errDown} }, do: doKey, err: true,
		decided: "acquired/0 store_error/503",
		phases:  "decide+ decide-acquired work+ work-201 complete+ complete-",
		calls:   "begin@decide complete@complete",
	}, {
		name: "released", do: doKey,
		handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) },
		decided: "acquired/0 released/502",
		phases:  "decide+ decide-acquired work+ work-502 complete+ complete-",
		calls:   "begin@decide release@complete",
	}, {
		name: "outcome_unknown", do: doKey, err: true,
		handler: func(w http.ResponseWriter, r *http.Request) { OutcomeUnknown(w, cause) },
		decided: "acquired/0 outcome_unknown/502",
		phases:  "decide+ decide-acquired work+ work-0 complete+ complete-",
		calls:   "begin@decide complete@complete",
	}, {
		name: "not_replayable", cfg: Config{MaxResponse: 4},
		handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "longer than four") },
		prepare: func(e *env) { doKey(e) }, do: doKey,
		decided: "not_replayable/410", phases: "decide+ decide-replayed", calls: "begin@decide",
	}, {
		name: "at most once", cfg: Config{AtMostOnce: true}, do: doKey,
		decided: "acquired/0 executed/201",
		phases:  "decide+ decide-acquired work+ work-201 complete+ complete-",
		calls:   "begin@decide mark_started@work complete@complete",
	}, {
		name: "canceled", err: true,
		do: func(e *env) int {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return e.serve(req("POST", "/x", rawID, "a").WithContext(ctx)).Code
		},
		wrap: func(s idem.Store) idem.Store {
			return &faultyStore{Store: s, begin: context.Canceled}
		},
		decided: "canceled/503", phases: "decide+ decide-canceled", calls: "begin@decide",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			obs := newRecObs(t)
			cfg := c.cfg
			cfg.Observer = obs
			e := newEnvStore(t, c.wrap, &cfg, c.handler)
			if c.prepare != nil {
				c.prepare(e)
				obs.reset()
			}
			status := c.do(e)
			obs.want(t, c.decided, c.phases, c.calls)
			obs.mu.Lock()
			defer obs.mu.Unlock()
			last := obs.events[len(obs.events)-1]
			if last.Status != 0 && last.Status != status {
				t.Errorf("event status %d, client got %d", last.Status, status)
			}
			for _, ev := range obs.events {
				if ev.Method != "POST" || ev.Path != "/x" {
					t.Errorf("event %+v: method or path wrong", ev)
				}
				if want := hashed; c.keyless {
					if ev.Key() != "" {
						t.Errorf("key %q, want none", ev.Key())
					}
				} else if ev.Key() != want {
					t.Errorf("key %q, want the hashed key %q", ev.Key(), want)
				}
				if s := fmt.Sprintf("%+v", ev); strings.Contains(s, rawID) {
					t.Errorf("event carries the raw key: %s", s)
				}
			}
			if (last.Err != nil) != c.err {
				t.Errorf("event error %v, want error: %v", last.Err, c.err)
			}
		})
	}
}

func TestObserverPanicReleases(t *testing.T) {
	t.Parallel()
	obs := newRecObs(t)
	e := newEnv(t, &Config{Observer: obs}, func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		e.do("POST", "/x", "k", "a")
	}()
	obs.want(t, "acquired/0 released/0", "decide+ decide-acquired work+ work-0 complete+ complete-", "begin@decide release@complete")
	if err := obs.events[1].Err; !errors.Is(err, errHandlerPanicked) {
		t.Errorf("released with %v, want the panic", err)
	}
}

// The handler's context descends from the work phase's, and a decision
// made while completing gets the complete phase's context: an OpenTelemetry
// observer nests the handler's spans under the work span.
func TestObserverContexts(t *testing.T) {
	t.Parallel()
	obs := newRecObs(t)
	var inHandler idem.AttemptPhase
	e := newEnv(t, &Config{Observer: obs}, func(w http.ResponseWriter, r *http.Request) {
		inHandler, _ = r.Context().Value(phaseKey{}).(idem.AttemptPhase)
		w.WriteHeader(http.StatusCreated)
	})
	e.do("POST", "/x", "k", "a")
	if inHandler != idem.PhaseWork {
		t.Fatalf("the handler ran in phase %v, want work", inHandler)
	}
	want := []idem.AttemptPhase{0, idem.PhaseComplete} // acquired: the request's; executed: completing
	for i, ctx := range obs.ctxs {
		if p, _ := ctx.Value(phaseKey{}).(idem.AttemptPhase); p != want[i] {
			t.Errorf("%v decided in phase %v, want %v", obs.events[i].Decision, p, want[i])
		}
	}
}

// Under a storm of duplicates each request gets exactly one final
// decision, matching its answer, and each key exactly one execution.
func TestObserverStorm(t *testing.T) {
	t.Parallel()
	const keys, dups = 6, 12
	obs := newRecObs(t)
	e := newEnv(t, &Config{Observer: obs}, nil)
	status := make([]int, keys*dups)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range status {
		wg.Go(func() {
			start.Wait()
			r := req("POST", "/x", "storm-"+strconv.Itoa(i%keys), "a")
			status[i] = e.serve(r.WithContext(context.WithValue(r.Context(), reqIDKey{}, i))).Code
		})
	}
	start.Done()
	wg.Wait()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	finals := make([]int, len(status))
	acquired := make([]bool, len(status))
	executed := map[string]int{}
	for j, ev := range obs.events {
		i := obs.ctxs[j].Value(reqIDKey{}).(int)
		if !ev.Decision.Final() {
			if ev.Decision != observe.DecisionAcquired || acquired[i] || finals[i] > 0 {
				t.Errorf("request %d: %v out of order", i, ev.Decision)
			}
			acquired[i] = true
			continue
		}
		finals[i]++
		if ev.Status != status[i] {
			t.Errorf("request %d: %v with status %d, client got %d", i, ev.Decision, ev.Status, status[i])
		}
		switch ev.Decision {
		case observe.DecisionExecuted:
			if !acquired[i] {
				t.Errorf("request %d executed without acquired", i)
			}
			executed[ev.Key()]++
		case observe.DecisionReplayed, observe.DecisionInFlight:
		default:
			t.Errorf("request %d: %v", i, ev.Decision)
		}
	}
	for i, n := range finals {
		if n != 1 {
			t.Errorf("request %d: %d final decisions, want 1", i, n)
		}
	}
	if len(executed) != keys {
		t.Errorf("%d keys executed, want %d", len(executed), keys)
	}
	for k, n := range executed {
		if n != 1 {
			t.Errorf("key %s executed %d times", k, n)
		}
	}
	e.wantCalls(keys)
}

// tagObs is an Observer that tags each phase's context and logs its
// calls, to check how Observers combines.
type tagObs struct {
	observe.NopObserver
	name string
	log  *[]string
	mu   *sync.Mutex
}

type tagKey string

func (o tagObs) add(s string) {
	o.mu.Lock()
	*o.log = append(*o.log, s)
	o.mu.Unlock()
}

func (o tagObs) StartPhase(ctx context.Context, p idem.AttemptPhase, _ string) (context.Context, func(observe.PhaseEnd)) {
	var seen []string
	for _, n := range []string{"a", "b"} {
		if ctx.Value(tagKey(n)) != nil {
			seen = append(seen, n)
		}
	}
	o.add(o.name + " start " + p.String() + " sees " + strings.Join(seen, ","))
	return context.WithValue(ctx, tagKey(o.name), true), func(observe.PhaseEnd) { o.add(o.name + " end " + p.String()) }
}

func (o tagObs) Decided(_ context.Context, e observe.Event) {
	o.add(o.name + " " + e.Decision.String())
}

func TestObservers(t *testing.T) {
	t.Parallel()
	if _, ok := observe.Observers().(observe.NopObserver); !ok {
		t.Error("Observers() is not the no-op observer")
	}
	var log []string
	var mu sync.Mutex
	a := tagObs{name: "a", log: &log, mu: &mu}
	if got := observe.Observers(nil, a, nil); got != observe.Observer(a) {
		t.Errorf("Observers of one is %T, want it unwrapped", got)
	}
	var fromFunc []observe.Decision
	hook := observe.ObserverFunc(func(_ context.Context, e observe.Event) { fromFunc = append(fromFunc, e.Decision) })
	b := tagObs{name: "b", log: &log, mu: &mu}
	e := newEnv(t, &Config{Observer: observe.Observers(a, nil, hook, b)}, nil)
	e.do("POST", "/x", "k", "a")
	want := []string{
		"a start decide sees ", "b start decide sees a", "b end decide", "a end decide",
		"a acquired", "b acquired",
		"a start work sees ", "b start work sees a", "b end work", "a end work",
		"a start complete sees ", "b start complete sees a",
		"a executed", "b executed",
		"b end complete", "a end complete",
	}
	if !slices.Equal(log, want) {
		t.Errorf("calls\n%s\nwant\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Equal(fromFunc, []observe.Decision{observe.DecisionAcquired, observe.DecisionExecuted}) {
		t.Errorf("the ObserverFunc saw %v", fromFunc)
	}
	// Hooks alone make no PhaseObserver: the middleware skips the phases.
	if _, ok := observe.Observers(hook, hook).(observe.PhaseObserver); ok {
		t.Error("two hooks combine into a PhaseObserver")
	}
	if _, ok := observe.Observers(hook, a).(observe.PhaseObserver); !ok {
		t.Error("a hook and a PhaseObserver combine into no PhaseObserver")
	}
}

func TestDecisionNames(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, d := range observe.FinalDecisions() {
		if !d.Final() || d.String() == "invalid" || seen[d.String()] {
			t.Errorf("decision %d: %q", d, d)
		}
		seen[d.String()] = true
	}
	if len(seen) != 13 || observe.DecisionAcquired.Final() || observe.Decision(0).Final() || observe.Decision(200).String() != "invalid" {
		t.Errorf("%d final decisions: %v", len(seen), seen)
	}
	if got := fmt.Sprint(observe.StoreOps()); got != "[begin complete release mark_started]" {
		t.Errorf("store ops %s", got)
	}
}

// With WaitTimeout, a duplicate's polls all belong to its one decide
// phase, and it ends replayed.
func TestObserverWaitPolls(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	obs := routeObs{newRecObs(t), newRecObs(t)}
	e := newEnv(t, &Config{Observer: obs, WaitTimeout: 10 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	send := func(id int, out chan<- int) {
		r := req("POST", "/x", "k", "a")
		out <- e.serve(r.WithContext(context.WithValue(r.Context(), reqIDKey{}, id))).Code
	}
	done, got := make(chan int), make(chan int)
	go send(0, done)
	<-entered
	go send(1, got)
	waitFor(t, "the duplicate to poll", func() bool {
		obs[1].mu.Lock()
		defer obs[1].mu.Unlock()
		return len(obs[1].calls) >= 2
	})
	close(release)
	if c := <-done; c != http.StatusCreated {
		t.Fatalf("first: %d", c)
	}
	if c := <-got; c != http.StatusCreated {
		t.Fatalf("duplicate: %d", c)
	}
	obs[0].want(t, "acquired/0 executed/201", "decide+ decide-acquired work+ work-201 complete+ complete-", "begin@decide complete@complete")
	obs[1].mu.Lock()
	calls := obs[1].calls
	obs[1].mu.Unlock()
	for _, c := range calls {
		if c != "begin@decide" {
			t.Fatalf("duplicate's store calls %v", calls)
		}
	}
	obs[1].want(t, "replayed/201/replayed", "decide+ decide-replayed", strings.Join(calls, " "))
}

// routeObs hands each call to the observer of the request whose context
// carries its index (reqIDKey).
type routeObs []*recObs

func (o routeObs) of(ctx context.Context) *recObs { return o[ctx.Value(reqIDKey{}).(int)] }

func (o routeObs) StartPhase(ctx context.Context, p idem.AttemptPhase, key string) (context.Context, func(observe.PhaseEnd)) {
	return o.of(ctx).StartPhase(ctx, p, key)
}
func (o routeObs) StoreCall(ctx context.Context, c observe.StoreCall) { o.of(ctx).StoreCall(ctx, c) }
func (o routeObs) Decided(ctx context.Context, e observe.Event)       { o.of(ctx).Decided(ctx, e) }
