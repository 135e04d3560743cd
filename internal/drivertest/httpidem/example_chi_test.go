package httpidem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
)

// chi takes the middleware as it is: it has the func(http.Handler)
// http.Handler shape.
func Example_chi() {
	store := memstore.New(nil)
	defer store.Close()
	m, err := httpidem.New(store, nil)
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.Use(m.Handler)
	orders := 0
	r.Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"sku":"A1"}`))
		req.Header.Set("Idempotency-Key", `"cart-5"`)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 201 order 1
	// 201 order 1
}
