package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/step"
)

// heldStepChildEnv, set to a store's DSN, makes the test binary the
// service of TestE2EHeldStep (TestMain): it serves stepService and dies
// inside its "charge" step when the parent kills it there.
const heldStepChildEnv = "IDEM_TEST_HELDSTEP_CHILD"

// stepService is an order of two steps behind httpidem's middleware on s:
// "reserve", then "charge", a foreign call that cannot be deduplicated
// (HoldUnknown). inCharge runs inside charge. A step's UnknownError is
// answered with httpidem.OutcomeUnknown, which holds the key naming the
// step.
func stepService(s idem.Store, cfg *httpidem.Config, inCharge func()) (*httpidem.Middleware, http.Handler, error) {
	cfg.ScopeFunc = proxyScopeFunc(nil, false)
	cfg.Lease = time.Second
	m, err := httpidem.New(s, cfg)
	if err != nil {
		return nil, nil, err
	}
	return m, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op, err := step.Load(ctx, s.(step.Store))
		if err == nil {
			_, err = step.Run(ctx, op, "reserve", nil, func(context.Context, *step.Step) (int, error) { return 7, nil })
		}
		if err == nil {
			_, err = step.Run(ctx, op, "charge", &step.Options{Unknown: step.HoldUnknown}, func(context.Context, *step.Step) (string, error) {
				inCharge()
				return "ch_1", nil
			})
		}
		switch {
		case errors.Is(err, idem.ErrOutcomeUnknown):
			httpidem.OutcomeUnknown(w, err)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"charge":"ch_1"}`)
		}
	})), nil
}

// heldStepChild is the child half of TestE2EHeldStep: it prints LISTEN
// and its address, and IN-CHARGE when a request is inside the charge
// step, where it waits for the parent's SIGKILL.
func heldStepChild(dsn string) int {
	d, err := storeurl.Parse(dsn)
	if err == nil {
		var h *storeurl.Handle
		if h, err = storeurl.Open(d); err == nil {
			var srv http.Handler
			_, srv, err = stepService(h.Store, &httpidem.Config{Logger: slog.New(slog.DiscardHandler)}, func() {
				fmt.Println("IN-CHARGE")
				select {} // the call went out; the process dies before its answer
			})
			var ln net.Listener
			if err == nil {
				ln, err = net.Listen("tcp", "127.0.0.1:0")
			}
			if err == nil {
				fmt.Println("LISTEN", ln.Addr())
				err = http.Serve(ln, srv)
			}
		}
	}
	fmt.Fprintln(os.Stderr, "child:", err)
	return 2
}

// A key held in a step, end to end (issue 38): a service (a child
// process) runs an order's "charge" step, a HoldUnknown foreign call, and
// is SIGKILLed inside it. The retry, served by another process on the
// same store, takes the claim over and holds the key naming the step:
// the built binary's 'idem keys list --state held' (table and JSON), the
// operations API of a proxy on the store, and the resolver's question
// all name "charge" and the finished "reserve". Another caller with the
// same key runs its own order and is never answered from this one; the
// resolver asks with the holder's credentials only, and its answer
// settles the key without running the step again.
func TestE2EHeldStep(t *testing.T) {
	t.Parallel()
	dsn := sqliteDSN(t)
	if code, _, errs := runCLI(t, "migrate", "--store", dsn); code != 0 {
		t.Fatalf("migrate: %s", errs)
	}
	child := testenv.StartChild(t, []string{heldStepChildEnv + "=" + dsn}, "-test.run=^$")
	addr := child.Line("LISTEN ", 2*time.Minute)
	sent := make(chan answer, 1)
	go func() { sent <- send(context.Background(), "http://"+addr, "order-1", "{}") }()
	child.Line("IN-CHARGE", 2*time.Minute)
	child.Kill()
	if a := <-sent; a.err == nil {
		t.Fatalf("the killed service answered: %+v", a)
	}

	// The service's records, which the resolver asks: 503 (ask again)
	// until ready, then the charge it made, for the step it was asked.
	var mu sync.Mutex
	var asked []string // Authorization and Idempotency-Step of each question
	var ready atomic.Bool
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Authorization")+" / "+r.Header.Get(httpidem.ResolveStepHeader))
		mu.Unlock()
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set(httpidem.ResolveStepHeader, r.Header.Get(httpidem.ResolveStepHeader))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charge":"ch_1","found":true}`)
	}))
	t.Cleanup(svc.Close)
	resolve, err := httpidem.ResolveURL(svc.URL+"/idempotency", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := openDSN(t, dsn)
	var charged atomic.Int64
	m, handler, err := stepService(store, &httpidem.Config{ResolveFunc: resolve, Logger: slog.New(slog.DiscardHandler)}, func() { charged.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	var a answer
	poll(t, "the retry to take the dead service's claim over", func() bool {
		a = post(t, srv.URL, "order-1", "{}")
		return a.status != http.StatusConflict
	})
	if a.status != http.StatusBadGateway || !strings.Contains(a.body, "outcome-unknown") || charged.Load() != 0 {
		t.Fatalf("retry after the kill: %+v (charged %d)", a, charged.Load())
	}
	digest := proxyDigest(t, "order-1")

	// idem keys list --state held, the built binary: STEP column, JSON.
	out, err := exec.Command(idemBin, "keys", "list", "--store", dsn, "--state", "held").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "STEP") {
		t.Fatalf("keys list: %v\n%s", err, out)
	}
	if row := rowOf(string(out), digest); len(row) < 6 || row[3] != "POST" || row[4] != "/charges" || row[5] != "charge" {
		t.Fatalf("keys list --state held, the held step's row: %q\n%s", row, out)
	}
	out, err = exec.Command(idemBin, "keys", "list", "--store", dsn, "--state", "held", "--json").Output()
	var views []recordView
	if err != nil || json.Unmarshal(out, &views) != nil || len(views) != 1 || views[0].Step != "charge" ||
		!slices.Equal(views[0].StepsFinished, []string{"reserve"}) || views[0].Request != "POST /charges" {
		t.Fatalf("keys list --json: %v\n%s", err, out)
	}

	// The operations API of a proxy on the same store.
	p := startProxy(t, "--upstream", svc.URL, "--store", dsn, "--admin", "127.0.0.1:0")
	code, body := get(t, p.admin+"/ops/api/keys?state=held&step=charge")
	var la listAnswer
	if code != 200 || json.Unmarshal([]byte(body), &la) != nil || la.Count != 1 || la.Keys[0].Digest != digest || la.Keys[0].Step != "charge" ||
		!slices.Equal(la.Keys[0].StepsFinished, []string{"reserve"}) {
		t.Fatalf("ops API: %d %s", code, body)
	}

	// Another caller with the same key: its own order, never this one's.
	if b := post(t, srv.URL, "order-1", "{}", "Authorization", "Bearer mallory"); b.status != http.StatusCreated || b.replayed || charged.Load() != 1 {
		t.Fatalf("another caller with the key: %+v (charged %d)", b, charged.Load())
	}

	// The resolver asked about the held step, with its caller's
	// credentials; its answer settles the key.
	poll(t, "the resolver's question", func() bool { mu.Lock(); defer mu.Unlock(); return len(asked) > 0 })
	ready.Store(true)
	poll(t, "the held step resolved", func() bool {
		a = post(t, srv.URL, "order-1", "{}")
		return a.status == http.StatusCreated
	})
	if !a.replayed || a.body != `{"charge":"ch_1","found":true}` || charged.Load() != 1 {
		t.Fatalf("retry after the resolution: %+v (charged %d: the step ran again)", a, charged.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, q := range asked {
		if q != "Bearer test-caller / charge" {
			t.Fatalf("the resolver asked %q; want the holder's credentials and the step: %q", q, asked)
		}
	}
}

// rowOf returns the fields of the line of table that begins with digest.
func rowOf(table, digest string) []string {
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, digest) {
			return strings.Fields(l)
		}
	}
	return nil
}
