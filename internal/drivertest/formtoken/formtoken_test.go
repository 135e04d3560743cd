package formtoken_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/formtoken"
	"github.com/idemkit/idem/onetime/sqltoken"
	"github.com/idemkit/idem/redis/redistoken"
)

func TestMain(m *testing.M) {
	if childMain() {
		return
	}
	goleak.VerifyTestMain(m)
}

// tokenBackends are the token stores the HTTP tests run on.
var tokenBackends = []struct {
	name string
	new  func(t *testing.T) onetime.Store
}{
	{"SQLite", func(t *testing.T) onetime.Store {
		db, err := sql.Open("sqlite", "file:"+testenv.SQLitePath(t)+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"Redis", func(t *testing.T) onetime.Store {
		r := testenv.UseRedis(t)
		c := redis.NewClient(&redis.Options{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB})
		t.Cleanup(func() { c.Close() })
		s, err := redistoken.New(c, &redistoken.Config{Prefix: r.Prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"MariaDB", func(t *testing.T) onetime.Store {
		db, _ := testenv.MySQLDB(t)
		db.SetMaxOpenConns(8)
		s, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.MySQL})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"PostgreSQL", func(t *testing.T) onetime.Store {
		db, _ := testenv.PostgresDB(t)
		db.SetMaxOpenConns(8) // the shared server allows 100 connections in all
		s, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.Postgres})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// forEachBackend runs f in parallel on every token store.
func forEachBackend(t *testing.T, f func(t *testing.T, store onetime.Store)) {
	for _, b := range tokenBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.new(t))
		})
	}
}

// fixture is a running server protected by the middleware. The session is
// the Session header; the handler creates an "order" per run.
type fixture struct {
	tokens *onetime.Tokens
	srv    *httptest.Server
	runs   atomic.Int64
}

func newFixture(t *testing.T, store onetime.Store, tcfg *onetime.Config, hcfg *httpidem.Config, handler http.HandlerFunc) *fixture {
	t.Helper()
	tokens, err := onetime.New(store, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	records := memstore.New(nil)
	t.Cleanup(func() { records.Close() })
	f := &fixture{tokens: tokens}
	hcfg = quiet(hcfg)
	mw, err := formtoken.New(tokens, records, &formtoken.Config{
		ScopeFunc: func(r *http.Request) (string, error) { return "session:" + r.Header.Get("Session"), nil },
		HTTP:      hcfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	if handler == nil {
		handler = func(w http.ResponseWriter, r *http.Request) {
			n := f.runs.Add(1)
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"order":%d,"item":%q}`, n, body)
		}
	}
	f.srv = httptest.NewServer(mw.Handler(handler))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) issue(t *testing.T, session string) string {
	t.Helper()
	tok, err := f.tokens.Issue(context.Background(), "session:"+session)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type answer struct {
	status   int
	body     string
	replayed bool
	problem  string
}

func (f *fixture) submit(t *testing.T, session, token, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/orders", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Session", session)
	if token != "" {
		req.Header.Set("Form-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// A handler that panics aborts the connection: status 0.
		return answer{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p struct{ Type string }
		_ = json.Unmarshal(b, &p)
		a.problem = p.Type
	}
	return a
}

// quiet returns a copy of c that logs nowhere.
func quiet(c *httpidem.Config) *httpidem.Config {
	var out httpidem.Config
	if c != nil {
		out = *c
	}
	out.Logger = slog.New(slog.DiscardHandler)
	return &out
}

func TestSecondSubmitGetsFirstResponse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store onetime.Store) {
		f := newFixture(t, store, nil, nil, nil)
		tok := f.issue(t, "alice")
		first := f.submit(t, "alice", tok, "book")
		if first.status != http.StatusCreated || first.replayed || first.body != `{"order":1,"item":"book"}` {
			t.Fatalf("first submit: %+v", first)
		}
		for range 3 {
			again := f.submit(t, "alice", tok, "book")
			if again.status != first.status || again.body != first.body || !again.replayed {
				t.Fatalf("repeat submit: %+v, want the first response replayed: %+v", again, first)
			}
		}
		if n := f.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		// A new token is a new submit.
		if a := f.submit(t, "alice", f.issue(t, "alice"), "pen"); a.status != http.StatusCreated || a.body != `{"order":2,"item":"pen"}` {
			t.Fatalf("submit with a fresh token: %+v", a)
		}
	})
}

// TestConcurrentDoubleSubmit: many identical submits at once — the handler
// runs once and every one of them gets the same response.
func TestConcurrentDoubleSubmit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store onetime.Store) {
		var runs atomic.Int64
		f := newFixture(t, store, nil, nil, func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			time.Sleep(50 * time.Millisecond) // let the duplicates pile up
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "order %d", n)
		})
		for round := range 3 {
			tok := f.issue(t, "bob")
			const n = 20
			answers := make([]answer, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					answers[i] = f.submit(t, "bob", tok, "x")
				}()
			}
			close(start)
			wg.Wait()
			fresh := 0
			for i, a := range answers {
				if a.status != http.StatusCreated || a.body != fmt.Sprintf("order %d", round+1) {
					t.Fatalf("round %d submit %d: %+v", round, i, a)
				}
				if !a.replayed {
					fresh++
				}
			}
			if fresh != 1 {
				t.Fatalf("round %d: %d answers not marked replayed, want 1", round, fresh)
			}
			if got := runs.Load(); got != int64(round+1) {
				t.Fatalf("round %d: handler ran %d times in total, want %d", round, got, round+1)
			}
		}
	})
}

// TestBusinessFailureRestoresToken: a submit whose handler fails (5xx or a
// panic) does not strand the user: the same token works once more.
func TestBusinessFailureRestoresToken(t *testing.T) {
	for _, failure := range []string{"500", "503", "panic"} {
		t.Run(failure, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, store onetime.Store) {
				var calls atomic.Int64
				f := newFixture(t, store, nil, nil, func(w http.ResponseWriter, r *http.Request) {
					if calls.Add(1) == 1 {
						switch failure {
						case "panic":
							panic(http.ErrAbortHandler) // net/http's quiet panic
						case "500":
							http.Error(w, "database down", http.StatusInternalServerError)
						default:
							http.Error(w, "try later", http.StatusServiceUnavailable)
						}
						return
					}
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, "paid")
				})
				tok := f.issue(t, "carol")
				first := f.submit(t, "carol", tok, "x")
				if failure != "panic" && first.status < 500 {
					t.Fatalf("first submit: %+v, want the failure", first)
				}
				second := f.submit(t, "carol", tok, "x")
				if second.status != http.StatusCreated || second.body != "paid" || second.replayed {
					t.Fatalf("retry with the same token after a failure: %+v, want it executed", second)
				}
				third := f.submit(t, "carol", tok, "x")
				if third.status != http.StatusCreated || third.body != "paid" || !third.replayed {
					t.Fatalf("third submit: %+v, want the success replayed", third)
				}
				if n := calls.Load(); n != 2 {
					t.Fatalf("handler ran %d times, want 2 (one failure, one success)", n)
				}
				// The token is spent for good now.
				if err := f.tokens.Consume(context.Background(), "session:carol", tok); !errors.Is(err, onetime.ErrUsed) {
					t.Fatalf("Consume after the success: %v, want ErrUsed", err)
				}
			})
		})
	}
}

// failingRestore is a token store whose Restore always fails, as if the
// store went down right after the handler failed.
type failingRestore struct{ onetime.Store }

func (failingRestore) Restore(context.Context, onetime.Digest, onetime.Use) error {
	return idem.StoreError(context.Background(), "restore token", errors.New("connection reset"))
}

// TestRestoreFailureStillRetries: even when the token cannot be restored,
// the retry through the same record re-takes it.
func TestRestoreFailureStillRetries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store onetime.Store) {
		var calls atomic.Int64
		f := newFixture(t, failingRestore{store}, nil, nil, func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		tok := f.issue(t, "dave")
		if a := f.submit(t, "dave", tok, ""); a.status != http.StatusBadGateway {
			t.Fatalf("first: %+v", a)
		}
		if a := f.submit(t, "dave", tok, ""); a.status != http.StatusCreated || a.replayed {
			t.Fatalf("retry after a failed restore: %+v", a)
		}
		// Nobody else gets the token: it is held by the record.
		if err := f.tokens.Consume(context.Background(), "session:dave", tok); !errors.Is(err, onetime.ErrUsed) {
			t.Fatalf("plain Consume: %v, want ErrUsed", err)
		}
	})
}

// flaky is a token store whose Consume fails while down is set.
type flaky struct {
	onetime.Store
	down atomic.Bool
}

func (f *flaky) Consume(ctx context.Context, tok, scope onetime.Digest, use onetime.Use) error {
	if f.down.Load() {
		return idem.StoreError(context.Background(), "consume token", errors.New("connection refused"))
	}
	return f.Store.Consume(ctx, tok, scope, use)
}

// TestTokenStoreOutage: while the token store is down a submit is answered
// 503 with Retry-After, the handler does not run and nothing is spent; the
// same token works once the store is back.
func TestTokenStoreOutage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store onetime.Store) {
		fl := &flaky{Store: store}
		f := newFixture(t, fl, nil, nil, nil)
		tok := f.issue(t, "gina")
		fl.down.Store(true)
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/orders", strings.NewReader("x"))
		req.Header.Set("Session", "gina")
		req.Header.Set("Form-Token", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("submit during the outage: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		fl.down.Store(false)
		if a := f.submit(t, "gina", tok, "x"); a.status != http.StatusCreated || a.replayed {
			t.Fatalf("submit after the outage: %+v", a)
		}
		if n := f.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

func TestRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store onetime.Store) {
		f := newFixture(t, store, &onetime.Config{TTL: 300 * time.Millisecond}, &httpidem.Config{Retention: time.Hour}, nil)
		check := func(what string, a answer, status int, problem string) {
			t.Helper()
			if a.status != status || a.problem != problem {
				t.Fatalf("%s: %+v, want %d %s", what, a, status, problem)
			}
		}
		check("no token", f.submit(t, "erin", "", "x"), http.StatusBadRequest, httpidem.ProblemMissingKey)
		check("malformed token", f.submit(t, "erin", "not-a-token", "x"), http.StatusForbidden, formtoken.ProblemUnknown)
		forged := strings.Repeat("A", onetime.TokenLen)
		check("never issued", f.submit(t, "erin", forged, "x"), http.StatusForbidden, formtoken.ProblemUnknown)

		tok := f.issue(t, "erin")
		check("foreign session", f.submit(t, "mallory", tok, "x"), http.StatusForbidden, formtoken.ProblemWrongScope)
		if a := f.submit(t, "erin", tok, "x"); a.status != http.StatusCreated {
			t.Fatalf("owner after a foreign attempt: %+v", a)
		}
		check("another body with the same token", f.submit(t, "erin", tok, "y"), http.StatusUnprocessableEntity, httpidem.ProblemMismatch)

		spent := f.issue(t, "erin")
		if err := f.tokens.Consume(context.Background(), "session:erin", spent); err != nil {
			t.Fatal(err)
		}
		check("spent elsewhere", f.submit(t, "erin", spent, "x"), http.StatusConflict, formtoken.ProblemUsed)

		expiring := f.issue(t, "erin")
		time.Sleep(time.Second) // well past the 300ms TTL
		check("expired", f.submit(t, "erin", expiring, "x"), http.StatusForbidden, formtoken.ProblemExpired)

		// Safe methods need no token.
		resp, err := http.Get(f.srv.URL + "/orders")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("GET: %d, want the handler's answer", resp.StatusCode)
		}
		if n := f.runs.Load(); n != 2 { // the owner's submit and the GET
			t.Fatalf("handler ran %d times, want 2", n)
		}
	})
}

// TestTakeoverAfterHolderDied: a holder claimed the record and spent the
// token, then vanished without completing. Once its lease runs out the
// resubmit takes the record over and re-takes the token (same record,
// higher fence) instead of being told "used".
func TestTakeoverAfterHolderDied(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store onetime.Store) {
		tokens, _ := onetime.New(store, nil)
		records := memstore.New(nil)
		defer records.Close()
		const lease = 200 * time.Millisecond
		mw, err := formtoken.New(tokens, records, &formtoken.Config{
			ScopeFunc:   func(*http.Request) (string, error) { return "session:frank", nil },
			HTTP:        quiet(&httpidem.Config{Lease: lease}),
			WaitTimeout: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int64
		srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
		})))
		defer srv.Close()
		ctx := context.Background()
		tok, _ := tokens.Issue(ctx, "session:frank")

		// The dead holder: what the middleware does before running the
		// handler, then nothing.
		key := idem.MustKey(formtoken.ScopePrefix+"session:frank", tok)
		body := "x"
		claim, err := records.Begin(ctx, idem.BeginRequest{Key: key, Lease: lease,
			Fingerprint: idem.RequestFingerprint(http.MethodPost, "/", "", []byte(body))})
		if err != nil || claim.Outcome != idem.Acquired {
			t.Fatalf("Begin: %v %v", claim.Outcome, err)
		}
		if _, err := tokens.Take(ctx, "session:frank", tok, onetime.UseFor(claim.Owner)); err != nil {
			t.Fatal(err)
		}

		post := func() int {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(body))
			req.Header.Set("Form-Token", tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := post()
			if st == http.StatusCreated {
				break
			}
			if st != http.StatusConflict || time.Now().After(deadline) {
				t.Fatalf("resubmit: %d, want 409 while the dead holder's lease lasts, then 201", st)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		// The dead holder, were it to wake up, could not give the token back.
		if err := tokens.Restore(ctx, onetime.NewReceipt(tok, onetime.UseFor(claim.Owner))); !errors.Is(err, onetime.ErrNotHeld) {
			t.Fatalf("stale holder's Restore: %v, want ErrNotHeld", err)
		}
	})
}
