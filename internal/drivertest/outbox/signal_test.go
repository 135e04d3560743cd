package outbox_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/outbox"
)

// syncBuffer is a bytes.Buffer safe for the relay's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// backlogCounter is a counter that also records the last Backlog report.
type backlogCounter struct {
	counter
	bmu     sync.Mutex
	pending int64
	oldest  time.Duration
	reports int
}

func (b *backlogCounter) Backlog(pending int64, oldest time.Duration) {
	b.bmu.Lock()
	defer b.bmu.Unlock()
	b.pending, b.oldest = pending, oldest
	b.reports++
}

func (b *backlogCounter) last() (int64, time.Duration, int) {
	b.bmu.Lock()
	defer b.bmu.Unlock()
	return b.pending, b.oldest, b.reports
}

// TestOutageSignals: the broker is away for many passes, then back. The
// relay logs one line when publishing starts failing and one when it
// recovers, whatever the number of failed passes in between (and a pass
// still in flight when the broker came back does not start a second
// outage), and a
// BacklogObserver sees the pending messages and the age of the oldest
// grow during the outage and fall to 0 after it.
func TestOutageSignals(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			ctx := ctxT(t)
			rec := newRecorder()
			rec.away = true
			var logs syncBuffer
			obs := &backlogCounter{}
			r, err := f.ob.NewRelay(rec, &outbox.RelayConfig{
				PollInterval: 5 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
				Retention: -1, Observer: obs, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			var _ outbox.BacklogObserver = obs
			f.enqueue(t, msg("a", "k1"), msg("b", "k2"), msg("c", ""))
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer r.Stop(ctx)
			waitFor(t, "many failed publish attempts", func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return rec.calls >= 10
			})
			waitFor(t, "the backlog reported with its age", func() bool {
				n, age, _ := obs.last()
				return n == 3 && age > 0
			})
			rec.mu.Lock()
			rec.away = false
			rec.mu.Unlock()
			f.waitSent(t, "every message sent", 3)
			waitFor(t, "an empty backlog reported", func() bool {
				n, age, _ := obs.last()
				return n == 0 && age == 0
			})
			if err := r.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			out := logs.String()
			if c := strings.Count(out, "publishing is failing"); c != 1 {
				t.Fatalf("%d 'publishing is failing' lines, want 1:\n%s", c, out)
			}
			if c := strings.Count(out, "publishing recovered"); c != 1 {
				t.Fatalf("%d 'publishing recovered' lines, want 1:\n%s", c, out)
			}
			if !strings.Contains(out, errAway.Error()) {
				t.Fatalf("the failing line does not say why:\n%s", out)
			}
			t.Logf("%s", out)
		})
	}
}
