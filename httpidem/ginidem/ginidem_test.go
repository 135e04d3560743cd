package ginidem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/ginidem"
	"github.com/idemkit/idem/memstore"
)

type answer struct {
	status   int
	body     string
	replayed bool
}

func post(t *testing.T, url, key string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":100}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"}
}

func server(t *testing.T) (string, map[string]*atomic.Int64, *[]int) {
	t.Helper()
	gin.SetMode(gin.ReleaseMode)
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	m, err := httpidem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]*atomic.Int64{"charge": {}, "pay": {}, "flaky": {}}
	var mu sync.Mutex
	var seen []int // statuses the outer middleware saw
	r := gin.New()
	r.Use(func(c *gin.Context) { // an outer middleware, like a logger
		c.Next()
		mu.Lock()
		seen = append(seen, c.Writer.Status())
		mu.Unlock()
	})
	r.Use(ginidem.Middleware(m))
	r.POST("/charge", func(c *gin.Context) {
		n := runs["charge"].Add(1)
		c.JSON(http.StatusCreated, gin.H{"charge": n})
	})
	r.POST("/pay", func(c *gin.Context) {
		runs["pay"].Add(1)
		c.AbortWithStatusJSON(http.StatusPaymentRequired, gin.H{"error": "card declined"})
	})
	r.POST("/flaky", func(c *gin.Context) {
		n := runs["flaky"].Add(1)
		c.String(http.StatusServiceUnavailable, "busy %d", n)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, runs, &seen
}

func TestGin(t *testing.T) {
	t.Parallel()
	url, runs, seen := server(t)

	first := post(t, url+"/charge", "k1")
	again := post(t, url+"/charge", "k1")
	if first.status != 201 || again.status != 201 || again.body != first.body || !again.replayed || first.replayed {
		t.Fatalf("success: first %+v, retry %+v", first, again)
	}
	if n := runs["charge"].Load(); n != 1 {
		t.Fatalf("charge ran %d times", n)
	}

	// A 402 the handler aborts with is stored as written.
	a, b := post(t, url+"/pay", "k2"), post(t, url+"/pay", "k2")
	if a.status != 402 || b.status != 402 || a.body != b.body || !strings.Contains(a.body, "card declined") || !b.replayed {
		t.Fatalf("stored error: %+v, %+v", a, b)
	}
	if n := runs["pay"].Load(); n != 1 {
		t.Fatalf("pay ran %d times", n)
	}

	// A 503 is not stored: the retry runs.
	c, d := post(t, url+"/flaky", "k3"), post(t, url+"/flaky", "k3")
	if c.body != "busy 1" || d.body != "busy 2" || d.replayed {
		t.Fatalf("retryable: %+v, %+v", c, d)
	}

	// The outer middleware saw the statuses really sent, replays included.
	want := []int{201, 201, 402, 402, 503, 503}
	if fmt.Sprint(*seen) != fmt.Sprint(want) {
		t.Fatalf("outer middleware saw %v, want %v", *seen, want)
	}
}

func TestGinConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	url, runs, _ := server(t)
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a := post(t, url+"/charge", "k-conc"); a.status != 201 && a.status != 409 {
				t.Errorf("unexpected %+v", a)
			}
		}()
	}
	wg.Wait()
	if n := runs["charge"].Load(); n != 1 {
		t.Fatalf("one key ran %d times", n)
	}
}
