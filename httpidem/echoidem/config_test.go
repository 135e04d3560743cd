package echoidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/echoidem"
	"github.com/idemkit/idem/memstore"
)

// TestConfigInherited: SkipFunc and RefusalFunc work under echo as under
// net/http.
func TestConfigInherited(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	skip := func(r *http.Request) bool { return r.URL.Path == "/dry-run" }
	refuse := func(w http.ResponseWriter, r *http.Request, p httpidem.Problem) {
		w.WriteHeader(p.Status)
		io.WriteString(w, "refused: "+p.Name())
	}
	m, err := httpidem.New(store, &httpidem.Config{SkipFunc: skip, RefusalFunc: refuse})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	e := echo.New()
	e.Use(echoidem.Middleware(m))
	e.POST("/:op", func(c echo.Context) error { runs.Add(1); return c.String(http.StatusCreated, "ok") })
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	for _, op := range []string{"charge", "refund", "dry-run", "dry-run"} {
		a := post(t, srv.URL+"/"+op, "k")
		switch {
		case op == "refund" && (a.status != http.StatusUnprocessableEntity || a.body != "refused: key-reused"):
			t.Fatalf("mismatch: %+v", a)
		case op == "dry-run" && (a.status != http.StatusCreated || a.replayed):
			t.Fatalf("skipped: %+v", a)
		}
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("ran %d times, want 1 + 2 skipped", n)
	}
}
