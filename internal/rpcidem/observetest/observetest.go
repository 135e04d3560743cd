// Package observetest records what an observe.Observer is told, for the
// tests of the RPC adapters.
package observetest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

type phaseKey struct{}

// PhaseOf returns the phase whose context ctx descends from (0: none).
func PhaseOf(ctx context.Context) idem.AttemptPhase {
	p, _ := ctx.Value(phaseKey{}).(idem.AttemptPhase)
	return p
}

// Recorder is an observe.Observer that records decisions ("acquired/0"),
// phases ("decide+", "decide-acquired", "work-") and store calls
// ("begin@decide"), and fails t on a phase ended twice or started inside
// another.
type Recorder struct {
	t      testing.TB
	mu     sync.Mutex
	events []observe.Event
	phases []string
	calls  []string
}

// New returns an empty Recorder.
func New(t testing.TB) *Recorder { return &Recorder{t: t} }

// StartPhase tags the context with p.
func (r *Recorder) StartPhase(ctx context.Context, p idem.AttemptPhase, key string) (context.Context, func(observe.PhaseEnd)) {
	if key == "" {
		r.t.Errorf("phase %v without a key", p)
	}
	if q := PhaseOf(ctx); q != 0 {
		r.t.Errorf("phase %v inside phase %v", p, q)
	}
	r.add(&r.phases, p.String()+"+")
	ended := 0
	return context.WithValue(ctx, phaseKey{}, p), func(e observe.PhaseEnd) {
		r.mu.Lock()
		ended++
		n := ended
		r.mu.Unlock()
		if n > 1 {
			r.t.Errorf("phase %v ended twice", p)
		}
		s := p.String() + "-"
		if p == idem.PhaseDecide {
			s += e.Decision.String()
		}
		r.add(&r.phases, s)
	}
}

// StoreCall records the op and the phase it ran in.
func (r *Recorder) StoreCall(ctx context.Context, c observe.StoreCall) {
	r.add(&r.calls, c.Op.String()+"@"+PhaseOf(ctx).String())
}

// Decided records e.
func (r *Recorder) Decided(_ context.Context, e observe.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *Recorder) add(list *[]string, s string) {
	r.mu.Lock()
	*list = append(*list, s)
	r.mu.Unlock()
}

// Events returns the decisions so far.
func (r *Recorder) Events() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observe.Event(nil), r.events...)
}

// Decisions returns the decisions so far with their codes, "acquired/0
// executed/0", replays marked "/replayed".
func (r *Recorder) Decisions() string {
	var parts []string
	for _, e := range r.Events() {
		s := e.Decision.String() + "/" + strconv.Itoa(e.Status)
		if e.Replayed {
			s += "/replayed"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// Phases returns the phases so far.
func (r *Recorder) Phases() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.phases, " ")
}

// Calls returns the store calls so far.
func (r *Recorder) Calls() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.calls, " ")
}

// Reset forgets everything.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.events, r.phases, r.calls = nil, nil, nil
	r.mu.Unlock()
}

var _ observe.Observer = (*Recorder)(nil)
