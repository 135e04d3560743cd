package idemtest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
)

// switchStore forwards to the store of the current "primary", as a
// client-side forwarder does after a failover switched it.
type switchStore struct {
	cur atomic.Pointer[memstore.Store]
}

func (s *switchStore) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	return s.cur.Load().Begin(ctx, req)
}
func (s *switchStore) Complete(ctx context.Context, o idem.Owner, r []byte) error {
	return s.cur.Load().Complete(ctx, o, r)
}
func (s *switchStore) Hold(ctx context.Context, o idem.Owner, r []byte) error {
	return s.cur.Load().Hold(ctx, o, r)
}
func (s *switchStore) Release(ctx context.Context, o idem.Owner) error {
	return s.cur.Load().Release(ctx, o)
}
func (s *switchStore) Extend(ctx context.Context, o idem.Owner, d time.Duration) error {
	return s.cur.Load().Extend(ctx, o, d)
}
func (s *switchStore) MarkStarted(ctx context.Context, o idem.Owner) error {
	return s.cur.Load().MarkStarted(ctx, o)
}
func (s *switchStore) Get(ctx context.Context, k idem.Key) (idem.Record, error) {
	return s.cur.Load().Get(ctx, k)
}
func (s *switchStore) Purge(ctx context.Context, g time.Duration, b int) (int64, error) {
	return s.cur.Load().Purge(ctx, g, b)
}

func newMem(t *testing.T) *memstore.Store {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// A failover that keeps every record (the "standby" is the primary
// itself) reports nothing lost and nothing run twice, and counts the
// calls it made.
func TestRunFailoverKeepsEverything(t *testing.T) {
	t.Parallel()
	for _, amo := range []bool{false, true} {
		sw := &switchStore{}
		sw.cur.Store(newMem(t))
		failovers := 0
		rep := idemtest.RunFailover(t, idemtest.FailoverTopology{
			Store:    sw,
			Failover: func(*testing.T) { failovers++ },
		}, idemtest.FailoverOptions{Callers: 4, Failovers: 2, AtMostOnce: amo, Between: 50 * time.Millisecond})
		if failovers != 2 {
			t.Errorf("Failover called %d times, want 2", failovers)
		}
		if rep.Ops == 0 || rep.Acknowledged == 0 || rep.Acknowledged > rep.Ops || rep.Lost != 0 || rep.RunTwice != 0 {
			t.Errorf("AtMostOnce %v: report %+v, want ops, acknowledged ≤ ops, none lost or run twice", amo, rep)
		}
	}
}

// A failover to a standby that has none of the primary's records (an
// asynchronous standby cut off from the start) loses every acknowledged
// result, and every lost key runs again: the suite must fail the test and
// say so. The losing run happens in a child process, whose failure is the
// expected outcome.
func TestRunFailoverDetectsLoss(t *testing.T) {
	if mode := os.Getenv("IDEMTEST_FAILOVER_CHILD"); mode != "" {
		sw := &switchStore{}
		sw.cur.Store(newMem(t))
		idemtest.RunFailover(t, idemtest.FailoverTopology{
			Store:    sw,
			Failover: func(t *testing.T) { sw.cur.Store(newMem(t)) },
		}, idemtest.FailoverOptions{Callers: 2, Failovers: 1, AtMostOnce: mode == "atmostonce", Between: 50 * time.Millisecond})
		return
	}
	t.Parallel()
	for _, mode := range []string{"plain", "atmostonce"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunFailoverDetectsLoss$", "-test.v")
		cmd.Env = append(os.Environ(), "IDEMTEST_FAILOVER_CHILD="+mode)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%s: the suite passed a failover that lost every record:\n%s", mode, out)
			continue
		}
		if !strings.Contains(string(out), "acknowledged results were lost") || !strings.Contains(string(out), "keys ran twice") {
			t.Errorf("%s: the suite failed without reporting the loss:\n%s", mode, out)
		}
		if strings.Contains(string(out), " 0 lost, 0 run twice") {
			t.Errorf("%s: the report counts nothing lost:\n%s", mode, out)
		}
	}
}
