package apicheck_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/apicheck"
	"github.com/idemkit/idem/memstore"
)

// Checking an API: the naive one alone re-executes every retry; with
// idem's middleware in front, the retry is a replay, and the counting
// oracle is the evidence.
func ExampleRun() {
	store := memstore.New(nil)
	defer store.Close()
	mw, _ := httpidem.New(store, &httpidem.Config{DropHeaders: []string{"Set-Cookie"}})
	for _, h := range []struct {
		name string
		srv  *httptest.Server
	}{{"naive", httptest.NewServer(&apicheck.Naive{})}, {"with idem", httptest.NewServer(mw.Handler(&apicheck.Naive{}))}} {
		rep, err := apicheck.Run(context.Background(), apicheck.Config{
			URL: h.srv.URL, Path: "/charges", Headers: []string{"Authorization: Bearer alice"},
			Oracle: "count:/stats#/charges", Only: []string{"replay-effect,concurrency"}, Rate: 500,
		}, nil)
		h.srv.Close()
		if err != nil {
			fmt.Println(err)
			continue
		}
		for _, r := range rep.Results {
			fmt.Printf("%s: %s %s\n", h.name, r.Status, r.ID)
		}
	}
	// Output:
	// naive: FAIL replay-effect
	// naive: FAIL concurrency
	// with idem: PASS replay-effect
	// with idem: PASS concurrency
}
