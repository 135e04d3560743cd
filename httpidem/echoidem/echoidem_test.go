package echoidem_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/echoidem"
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
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	m, err := httpidem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]*atomic.Int64{"charge": {}, "pay": {}, "flaky": {}}
	var mu sync.Mutex
	var seen []int
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // an outer middleware, like a logger
		return func(c echo.Context) error {
			err := next(c)
			mu.Lock()
			seen = append(seen, c.Response().Status)
			mu.Unlock()
			return err
		}
	})
	e.Use(echoidem.Middleware(m))
	e.POST("/charge", func(c echo.Context) error {
		n := runs["charge"].Add(1)
		return c.JSON(http.StatusCreated, map[string]int64{"charge": n})
	})
	e.POST("/pay", func(c echo.Context) error {
		runs["pay"].Add(1)
		return echo.NewHTTPError(http.StatusPaymentRequired, "card declined")
	})
	e.POST("/flaky", func(c echo.Context) error {
		runs["flaky"].Add(1)
		return errors.New("database timeout") // echo answers 500
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL, runs, &seen
}

func TestEcho(t *testing.T) {
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

	// The returned HTTPError is what is stored and replayed, not an empty 200.
	a, b := post(t, url+"/pay", "k2"), post(t, url+"/pay", "k2")
	if a.status != 402 || b.status != 402 || a.body != b.body || !strings.Contains(a.body, "card declined") || !b.replayed {
		t.Fatalf("stored error: %+v, %+v", a, b)
	}
	if n := runs["pay"].Load(); n != 1 {
		t.Fatalf("pay ran %d times", n)
	}

	// A plain error becomes 500, which is not stored: the retry runs.
	c, d := post(t, url+"/flaky", "k3"), post(t, url+"/flaky", "k3")
	if c.status != 500 || d.status != 500 || d.replayed || runs["flaky"].Load() != 2 {
		t.Fatalf("retryable: %+v, %+v, ran %d", c, d, runs["flaky"].Load())
	}

	want := []int{201, 201, 402, 402, 500, 500}
	if fmt.Sprint(*seen) != fmt.Sprint(want) {
		t.Fatalf("outer middleware saw %v, want %v", *seen, want)
	}
}

// TestWrapMiddlewareLosesErrors documents the bug Middleware fixes: with
// echo.WrapMiddleware the returned error is written after the record was
// completed, so the stored answer is an empty 200.
func TestWrapMiddlewareLosesErrors(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	defer store.Close()
	m, err := httpidem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(echo.WrapMiddleware(m.Handler))
	e.POST("/pay", func(c echo.Context) error { return echo.NewHTTPError(http.StatusPaymentRequired, "card declined") })
	srv := httptest.NewServer(e)
	defer srv.Close()
	post(t, srv.URL+"/pay", "k")
	if b := post(t, srv.URL+"/pay", "k"); b.status != 200 || b.body != "" {
		t.Fatalf("WrapMiddleware's replay: %+v (if echo changed, update the package doc)", b)
	}
}

func TestEchoConcurrentDuplicates(t *testing.T) {
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
