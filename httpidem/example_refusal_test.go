package httpidem_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"text/template"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
)

// Refusals in the error shape of a Stripe-style API, which its SDKs raise
// as errors, with Stripe-Should-Retry and Idempotent-Retryable saying
// that retrying a reused key cannot help.
func ExampleStripeRefusal() {
	s := memstore.New(nil)
	defer s.Close()
	m, _ := httpidem.New(s, &httpidem.Config{RefusalFunc: httpidem.StripeRefusal, Logger: slog.New(slog.DiscardHandler)})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1"}`)
	}))
	for _, body := range []string{"amount=100", "amount=200"} {
		r := httptest.NewRequest("POST", "/v1/charges", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk_test")
		r.Header.Set("Idempotency-Key", "order-17")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Stripe-Should-Retry"), w.Header().Get(httpidem.RetryableHeader), w.Body)
	}
	// Output:
	// 201   {"id":"ch_1"}
	// 422 false false {"error":{"type":"idempotency_error","code":"key_reused","message":"Idempotency-Key reused with a different request: this key was used for a request with another method, path, query or body"}}
}

// A template of one's own error shape.
func ExampleTemplateRefusal() {
	t := template.Must(template.New("error").Funcs(httpidem.TemplateFuncs).Parse(
		`{"fault":{"code":{{json .Code}},"retryable":{{.Retryable}}}}`))
	s := memstore.New(nil)
	defer s.Close()
	m, _ := httpidem.New(s, &httpidem.Config{RefusalFunc: httpidem.TemplateRefusal(t, ""), Logger: slog.New(slog.DiscardHandler)})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	r := httptest.NewRequest("POST", "/orders", nil)
	r.Header.Set("Authorization", "Bearer sk_test")
	r.Header.Set("Idempotency-Key", "not a valid key")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Body)
	// Output:
	// 400 application/json {"fault":{"code":"invalid_key","retryable":false}}
}
