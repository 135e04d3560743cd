package grpcidem_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/internal/rpcidem/grpctest"
	"github.com/idemkit/idem/internal/rpcidem/observetest"
	"github.com/idemkit/idem/observe"
)

// startObserved is start with rec as the Observer, and an inner
// interceptor that records the phase the handler runs in.
func startObserved(t *testing.T, store idem.Store, rec *observetest.Recorder) (*grpctest.Env, *[]idem.AttemptPhase) {
	t.Helper()
	in, err := grpcidem.New(store, &grpcidem.Config{Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []idem.AttemptPhase
	inner := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		seen = append(seen, observetest.PhaseOf(ctx))
		mu.Unlock()
		return h(ctx, req)
	}
	// Outermost, a handler's panic becomes Internal after grpcidem saw it.
	recoverer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Errorf(codes.Internal, "panic: %v", p)
			}
		}()
		return h(ctx, req)
	}
	return grpctest.Serve(t, grpc.ChainUnaryInterceptor(recoverer, in.Unary(), inner)), &seen
}

const method = "/grpc.testing.TestService/UnaryCall"

func TestObserverDecisions(t *testing.T) {
	t.Parallel()
	const work = "decide+ decide-acquired work+ work- complete+ complete-"
	for _, c := range []struct {
		name, key, body string
		prepare         bool // the same call once before, unobserved
		decided, phases string
		calls           string
	}{
		{"executed", "k", "a", false, "acquired/0 executed/0", work, "begin@decide complete@complete"},
		{"replayed", "k", "a", true, "replayed/0/replayed", "decide+ decide-replayed", "begin@decide"},
		{"stored error", "k", "e", false, "acquired/0 executed/3", work, "begin@decide complete@complete"},
		{"released", "k", "u", false, "acquired/0 released/14", work, "begin@decide release@complete"},
		{"panic", "k", "p", false, "acquired/0 released/0", work, "begin@decide release@complete"},
		{"keyless", "", "a", false, "keyless/0", "", ""},
		{"rejected", "bad key", "a", false, "rejected/3", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec := observetest.New(t)
			e, seen := startObserved(t, newMem(t), rec)
			if c.prepare {
				if _, err := e.Client.UnaryCall(grpctest.CallCtx(c.key, "alice"), grpctest.Req(c.body)); err != nil {
					t.Fatal(err)
				}
				rec.Reset()
				*seen = nil
			}
			_, _ = e.Client.UnaryCall(grpctest.CallCtx(c.key, "alice"), grpctest.Req(c.body))
			if got := rec.Decisions(); got != c.decided {
				t.Errorf("decisions %q, want %q", got, c.decided)
			}
			if got := rec.Phases(); got != c.phases {
				t.Errorf("phases %q, want %q", got, c.phases)
			}
			if got := rec.Calls(); got != c.calls {
				t.Errorf("store calls %q, want %q", got, c.calls)
			}
			for _, ev := range rec.Events() {
				if ev.Method != method || ev.Path != "" {
					t.Errorf("event %+v", ev)
				}
				if want := c.key != "" && c.name != "rejected"; (ev.Key() != "") != want || (ev.Key() != "" && ev.Key() == c.key) {
					t.Errorf("event key %q", ev.Key())
				}
			}
			if c.phases == work && (len(*seen) != 1 || (*seen)[0] != idem.PhaseWork) {
				t.Errorf("the handler ran in phases %v, want work", *seen)
			}
		})
	}
}

// A storm of duplicates: one execution per key, every call exactly one
// final decision.
func TestObserverStorm(t *testing.T) {
	t.Parallel()
	const keys, dups = 4, 10
	rec := observetest.New(t)
	e, _ := startObserved(t, newMem(t), rec)
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[codes.Code]int{}
	for i := range keys * dups {
		wg.Go(func() {
			_, err := e.Client.UnaryCall(grpctest.CallCtx("storm-"+strconv.Itoa(i%keys), "alice"), grpctest.Req("s-"+strconv.Itoa(i%keys)))
			mu.Lock()
			answers[status.Code(err)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	finals := map[observe.Decision]int{}
	executed := map[string]int{}
	acquired := 0
	for _, ev := range rec.Events() {
		if !ev.Decision.Final() {
			acquired++
			continue
		}
		finals[ev.Decision]++
		if ev.Decision == observe.DecisionExecuted {
			executed[ev.Key()]++
		}
	}
	if len(executed) != keys || acquired != keys {
		t.Errorf("executed %v, acquired %d", executed, acquired)
	}
	for k, n := range executed {
		if n != 1 {
			t.Errorf("key %s executed %d times", k, n)
		}
	}
	if finals[observe.DecisionExecuted]+finals[observe.DecisionReplayed] != answers[codes.OK] ||
		finals[observe.DecisionInFlight] != answers[codes.Aborted] || len(finals) > 3 {
		t.Errorf("decisions %v, answers %v", finals, answers)
	}
	for k := range keys {
		if n := e.Svc.Count("s-" + strconv.Itoa(k)); n != 1 {
			t.Errorf("key %d ran %d times", k, n)
		}
	}
}
