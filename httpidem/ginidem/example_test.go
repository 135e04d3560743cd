package ginidem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/ginidem"
	"github.com/idemkit/idem/memstore"
)

func Example() {
	store := memstore.New(nil)
	defer store.Close()
	m, err := httpidem.New(store, nil)
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	charges := 0
	r.POST("/charges", ginidem.Middleware(m), func(c *gin.Context) {
		charges++
		c.JSON(http.StatusCreated, gin.H{"charge": charges})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", `"order-17"`)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// 201 {"charge":1} replayed: false
	// 201 {"charge":1} replayed: true
}
