package browser_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/idemkit/idem/idemclient/browser"
)

// A Go service serves the module next to its pages.
func ExampleHandler() {
	mux := http.NewServeMux()
	mux.Handle("GET /_idem/idem.js", browser.Handler())
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/_idem/idem.js", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output: 200 text/javascript; charset=utf-8
}
