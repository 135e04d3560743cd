package formtoken_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/formtoken"
	"github.com/idemkit/idem/onetime/sqltoken"
	"github.com/idemkit/idem/sqlstore"
)

const (
	childEnv = "FORMTOKEN_CRASH_CHILD"
	// crashLease is the records' lease: the resubmit takes the dead
	// process's record over once it runs out. Not shorter: the heartbeat
	// renews every third of the lease and gives the work up (cancelling
	// its context: the token's Consume then fails, 503) when no renewal
	// succeeds within four fifths of it, which a 300 ms lease did not
	// survive on a loaded machine, with SQLite's commits behind -race.
	crashLease = 2 * time.Second
)

// crashStack opens the middleware over one SQLite file shared by processes:
// tokens in sqltoken, records in sqlstore.
func crashStack(path string, handler http.Handler) (*onetime.Tokens, http.Handler, func(), error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, nil, nil, err
	}
	ctx := context.Background()
	ts, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
	if err == nil {
		err = ts.Migrate(ctx)
	}
	var rs *sqlstore.Store
	if err == nil {
		rs, err = sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite})
	}
	if err == nil {
		err = rs.Migrate(ctx)
	}
	var tokens *onetime.Tokens
	if err == nil {
		tokens, err = onetime.New(ts, nil)
	}
	var mw *formtoken.Middleware
	if err == nil {
		mw, err = formtoken.New(tokens, rs, &formtoken.Config{
			ScopeFunc:   func(*http.Request) (string, error) { return "session:crash", nil },
			WaitTimeout: -1,
			HTTP:        &httpidem.Config{Lease: crashLease, Logger: slog.New(slog.DiscardHandler)},
		})
	}
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return tokens, mw.Handler(handler), func() { db.Close() }, nil
}

// childMain is the process that dies: it submits the form and is killed
// while the handler runs, after the token was spent.
func childMain() bool {
	v := os.Getenv(childEnv)
	if v == "" {
		return false
	}
	path, tok, _ := strings.Cut(v, "|")
	_, h, _, err := crashStack(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("RUNNING")
		select {} // killed here
	}))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("amount=10"))
	req.Header.Set("Form-Token", tok)
	h.ServeHTTP(httptest.NewRecorder(), req)
	fmt.Println("RETURNED")
	os.Exit(3)
	return true
}

// TestCrashAfterTokenSpent really kills the process that spent the token
// while its handler runs. The user's resubmit of the same form is not
// stranded: after the dead process's lease it takes the record over,
// re-takes the token and runs once; the token is spent for anyone else.
func TestCrashAfterTokenSpent(t *testing.T) {
	path := t.TempDir() + "/crash.db"
	var runs atomic.Int64
	tokens, h, closeDB, err := crashStack(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "paid once")
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	ctx := context.Background()
	tok, err := tokens.Issue(ctx, "session:crash")
	if err != nil {
		t.Fatal(err)
	}

	if rest := testenv.KillAtLine(t, "RUNNING", time.Minute, []string{childEnv + "=" + path + "|" + tok}, "-test.run=^$"); rest != "" {
		t.Fatalf("child said RUNNING%s, want RUNNING", rest)
	}

	// The token is spent by the dead process: a plain consumer is refused.
	if err := tokens.Consume(ctx, "session:crash", tok); !errors.Is(err, onetime.ErrUsed) {
		t.Fatalf("Consume after the crash: %v, want ErrUsed", err)
	}
	submit := func() (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("amount=10"))
		req.Header.Set("Form-Token", tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := submit()
		if code == http.StatusCreated {
			if body != "paid once" {
				t.Fatalf("body %q", body)
			}
			break
		}
		if code != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("resubmit: %d %s, want 409 while the dead lease lasts, then 201", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := submit(); code != http.StatusCreated || body != "paid once" {
		t.Fatalf("second resubmit: %d %q, want the replay", code, body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times in the surviving process, want 1", n)
	}
}
