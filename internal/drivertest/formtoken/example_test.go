package formtoken_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/formtoken"
	"github.com/idemkit/idem/onetime/sqltoken"
)

// A double-submitted payment form: the second submit gets the first one's
// response, and the handler runs once.
func Example() {
	dir, _ := os.MkdirTemp("", "formtoken")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	tokenStore, _ := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
	if err := tokenStore.Migrate(context.Background()); err != nil {
		panic(err)
	}
	tokens, _ := onetime.New(tokenStore, nil)
	records := memstore.New(nil) // in production: sqlstore, redisstore or tiered
	defer records.Close()

	session := func(r *http.Request) (string, error) { return "session:" + r.Header.Get("Session"), nil }
	mw, err := formtoken.New(tokens, records, &formtoken.Config{ScopeFunc: session})
	if err != nil {
		panic(err)
	}
	charges := 0
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge #%d accepted", charges)
	})))
	defer srv.Close()

	tok, _ := tokens.Issue(context.Background(), "session:alice") // rendered into the form
	submit := func(session string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("amount=10"))
		req.Header.Set("Session", session)
		req.Header.Set("Form-Token", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 {
			body = []byte(resp.Header.Get("Content-Type"))
		}
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(body))
	}
	submit("alice")   // the click
	submit("alice")   // the double click
	submit("mallory") // someone else's session with a stolen token
	fmt.Println("charges:", charges)
	// Output:
	// 201  charge #1 accepted
	// 201 true charge #1 accepted
	// 403  application/problem+json
	// charges: 1
}
