package echoidem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/echoidem"
	"github.com/idemkit/idem/memstore"
)

func Example() {
	store := memstore.New(nil)
	defer store.Close()
	m, err := httpidem.New(store, nil)
	if err != nil {
		panic(err)
	}
	e := echo.New()
	attempts := 0
	e.POST("/charges", func(c echo.Context) error {
		attempts++
		return echo.NewHTTPError(http.StatusPaymentRequired, "card declined")
	}, echoidem.Middleware(m))
	srv := httptest.NewServer(e)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", `"order-18"`)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("attempts:", attempts)
	// Output:
	// 402 {"message":"card declined"} replayed: false
	// 402 {"message":"card declined"} replayed: true
	// attempts: 1
}
