package inboxengine_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errBoom = errors.New("boom")
	down    = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED} // inbox.IsTransient
)

// TestPolicyEveryBroker runs the consumer policy (adapter.Engine) through
// each broker adapter on its real broker: the same messages, the same
// handler verdicts, the same knobs give the same counts, handler calls
// and dead letters on NATS JetStream, RabbitMQ and Kafka.
func TestPolicyEveryBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ids  []string // published in this order
		// verdict is the handler's answer on the call-th run for id, after
		// it wrote its effect in the inbox transaction.
		verdict     func(ctx context.Context, tx *sql.Tx, id string, call int) error
		maxFailures int
		deadLetter  bool
		want        inbox.DeliveryStats
		calls       map[string]int // handler runs per message ID
		dead        []deadLetter   // Reason: a substring
	}{
		{
			name: "processed, then a duplicate acked without the handler", ids: []string{"a", "a"},
			want:  inbox.DeliveryStats{Processed: 1, Duplicates: 1},
			calls: map[string]int{"a": 1},
		},
		{
			name: "ordinary failures below the budget: retried, then processed", ids: []string{"a"},
			verdict: failFirst(2, errBoom), maxFailures: 5, deadLetter: true,
			want:  inbox.DeliveryStats{Processed: 1, Retried: 2},
			calls: map[string]int{"a": 3},
		},
		{
			name: "poison: dead-lettered at the budget, the next message flows", ids: []string{"p", "b"},
			verdict: failFor("p", errBoom), maxFailures: 3, deadLetter: true,
			want:  inbox.DeliveryStats{Processed: 1, Retried: 2, DeadLettered: 1},
			calls: map[string]int{"p": 3, "b": 1},
			dead:  []deadLetter{{ID: "p", Failures: 3, Reason: "boom"}},
		},
		{
			name: "permanent: dead-lettered on the first failure", ids: []string{"p", "b"},
			verdict: failFor("p", inbox.Permanent(errBoom)), maxFailures: 5, deadLetter: true,
			want:  inbox.DeliveryStats{Processed: 1, DeadLettered: 1},
			calls: map[string]int{"p": 1, "b": 1},
			dead:  []deadLetter{{ID: "p", Failures: 1, Reason: "boom"}},
		},
		{
			name: "infrastructure failures are retried in place and never spend the budget", ids: []string{"a"},
			verdict: failFirst(3, down), maxFailures: 1, deadLetter: true,
			want:  inbox.DeliveryStats{Processed: 1, Retried: 3},
			calls: map[string]int{"a": 4},
		},
		{
			name: "a panicking handler is an ordinary failure", ids: []string{"a"},
			verdict: func(_ context.Context, _ *sql.Tx, _ string, call int) error {
				if call <= 2 {
					panic("handler bug")
				}
				return nil
			},
			maxFailures: 5, deadLetter: true,
			want:  inbox.DeliveryStats{Processed: 1, Retried: 2},
			calls: map[string]int{"a": 3},
		},
		{
			name: "early: parked until its predecessor is applied, never poison", ids: []string{"v2", "v1"},
			verdict: func(ctx context.Context, tx *sql.Tx, id string, _ int) error {
				if id != "v2" {
					return nil
				}
				var n int
				if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE id = 'v1'`).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					return fmt.Errorf("%w: v1 not applied", inbox.ErrNotYet)
				}
				return nil
			},
			maxFailures: 1, deadLetter: true,
			want:  inbox.DeliveryStats{Processed: 2, Retried: 1},
			calls: map[string]int{"v2": 2, "v1": 1},
		},
	} {
		for _, b := range rigs {
			t.Run(tc.name+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				db, _ := adaptertest.NewPostgresInbox(t)
				r := b.new(t)
				for _, id := range tc.ids {
					r.publish(t, id)
				}
				var mu sync.Mutex
				calls := map[string]int{}
				h := func(ctx context.Context, tx *sql.Tx, id string) error {
					mu.Lock()
					calls[id]++
					call := calls[id]
					mu.Unlock()
					if err := adaptertest.InsertEffect(ctx, tx, id, ""); err != nil {
						return err
					}
					if tc.verdict == nil {
						return nil
					}
					return tc.verdict(ctx, tx, id, call)
				}
				fixed := func(int) time.Duration { return 10 * time.Millisecond }
				s := r.start(t, db.Inbox, h, policy{
					MaxFailures: tc.maxFailures, BackoffFunc: fixed, TransientBackoffFunc: fixed, DeadLetter: tc.deadLetter,
				})
				settled := tc.want.Processed + tc.want.Duplicates + tc.want.DeadLettered
				adaptertest.WaitFor(t, "every message settled", 90*time.Second, func() bool {
					st := s.Stats()
					return st.Processed+st.Duplicates+st.DeadLettered >= settled
				})
				adaptertest.Stop(t, s, 30*time.Second)

				if got := s.Stats(); got != tc.want {
					t.Errorf("stats %+v, want %+v", got, tc.want)
				}
				mu.Lock()
				if fmt.Sprint(calls) != fmt.Sprint(tc.calls) {
					t.Errorf("handler runs %v, want %v", calls, tc.calls)
				}
				mu.Unlock()
				if rows, distinct := db.Counts(t); rows != int(tc.want.Processed) || distinct != rows {
					t.Errorf("%d effects (%d distinct IDs), want %d, each once", rows, distinct, tc.want.Processed)
				}
				if len(tc.dead) == 0 {
					return
				}
				dead := r.deadLetters(t, len(tc.dead))
				if len(dead) != len(tc.dead) {
					t.Fatalf("dead letters %+v, want %+v", dead, tc.dead)
				}
				for i, d := range dead {
					w := tc.dead[i]
					if d.ID != w.ID || d.Failures != w.Failures || !strings.Contains(d.Reason, w.Reason) {
						t.Errorf("dead letter %d: %+v, want %+v (reason containing %q)", i, d, w, w.Reason)
					}
				}
			})
		}
	}
}

// failFirst fails the first n runs of every message with err.
func failFirst(n int, err error) func(context.Context, *sql.Tx, string, int) error {
	return func(_ context.Context, _ *sql.Tx, _ string, call int) error {
		if call <= n {
			return err
		}
		return nil
	}
}

// failFor fails every run of message id with err.
func failFor(id string, err error) func(context.Context, *sql.Tx, string, int) error {
	return func(_ context.Context, _ *sql.Tx, got string, _ int) error {
		if got == id {
			return err
		}
		return nil
	}
}
