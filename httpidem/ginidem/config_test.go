package ginidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/ginidem"
	"github.com/idemkit/idem/memstore"
)

// TestConfigInherited: SkipFunc and RefusalFunc work under gin as under
// net/http.
func TestConfigInherited(t *testing.T) {
	t.Parallel()
	gin.SetMode(gin.ReleaseMode)
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	m, err := httpidem.New(store, &httpidem.Config{
		SkipFunc: func(r *http.Request) bool { return r.URL.Path == "/dry-run" },
		RefusalFunc: func(w http.ResponseWriter, r *http.Request, p httpidem.Problem) {
			w.WriteHeader(p.Status)
			io.WriteString(w, "refused: "+p.Name())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	r := gin.New()
	r.Use(ginidem.Middleware(m))
	r.POST("/:op", func(c *gin.Context) { runs.Add(1); c.String(http.StatusCreated, "ok") })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	post(t, srv.URL+"/charge", "k")
	if a := post(t, srv.URL+"/refund", "k"); a.status != http.StatusUnprocessableEntity || a.body != "refused: key-reused" {
		t.Fatalf("mismatch: %+v", a)
	}
	post(t, srv.URL+"/dry-run", "k")
	if a := post(t, srv.URL+"/dry-run", "k"); a.status != http.StatusCreated || a.replayed || runs.Load() != 3 {
		t.Fatalf("skipped: %+v after %d runs, want 1 + 2 skipped", a, runs.Load())
	}
}
