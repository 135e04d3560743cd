package ginidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
		SkipFunc: func(r *http.Request) bool { return r.Header.Get("X-Dry-Run") == "1" },
		RefusalFunc: func(w http.ResponseWriter, r *http.Request, p httpidem.Problem) {
			w.Header().Set("Content-Type", "text/plain")
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
	r.POST("/charge", func(c *gin.Context) { runs.Add(1); c.String(http.StatusCreated, "ok") })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	send := func(body string, header ...string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charge", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k")
		req.Header.Set("Authorization", "Bearer alice")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	send(`{"amount":1}`)
	if code, body := send(`{"amount":2}`); code != http.StatusUnprocessableEntity || body != "refused: key-reused" {
		t.Fatalf("mismatch: %d %q", code, body)
	}
	send(`{"amount":2}`, "X-Dry-Run", "1")
	send(`{"amount":2}`, "X-Dry-Run", "1")
	if n := runs.Load(); n != 3 {
		t.Fatalf("ran %d times, want 1 + 2 skipped", n)
	}
}
