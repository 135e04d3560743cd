package httpidem

import (
	"encoding/json"
	"net/http"
	"testing"
	"text/template"
)

// The built-in refusal shapes (issue 34 §5): Stripe's error object with
// Stripe-Should-Retry, and a template; both keep the semantic headers.
func TestStripeAndTemplateRefusals(t *testing.T) {
	t.Parallel()
	tmpl := template.Must(template.New("err").Funcs(TemplateFuncs).Parse(
		`{"err":{{json .Code}},"msg":{{json .Message}},"retryable":{{.Retryable}}}`))
	for name, rf := range map[string]func(http.ResponseWriter, *http.Request, Problem){
		"stripe":   StripeRefusal,
		"template": TemplateRefusal(tmpl, ""),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			block := make(chan struct{})
			e := newEnv(t, &Config{RefusalFunc: rf}, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/block" {
					<-block
				}
				w.WriteHeader(201)
			})
			done := make(chan struct{})
			go func() { defer close(done); e.do("POST", "/block", "b", `{}`) }()
			waitFor(t, "the first request in flight", func() bool { return e.calls.Load() == 1 })
			inFlight := e.do("POST", "/block", "b", `{}`)
			close(block)
			<-done
			invalid := e.do("POST", "/x", "a b", `{}`)
			for _, tc := range []struct {
				w         *http.Response
				status    int
				code, typ string
				retryable string
			}{
				{inFlight.Result(), 409, "in_flight", "idempotency_error", "true"},
				{invalid.Result(), 400, "invalid_key", "invalid_request_error", "false"},
			} {
				if tc.w.StatusCode != tc.status || tc.w.Header.Get("Content-Type") != "application/json" ||
					tc.w.Header.Get(RetryableHeader) != tc.retryable {
					t.Fatalf("%s: %d %v", tc.code, tc.w.StatusCode, tc.w.Header)
				}
				var body map[string]any
				if err := json.NewDecoder(tc.w.Body).Decode(&body); err != nil {
					t.Fatal(err)
				}
				switch name {
				case "stripe":
					e, _ := body["error"].(map[string]any)
					if e["type"] != tc.typ || e["code"] != tc.code || e["message"] == "" {
						t.Fatalf("%s: body %v", tc.code, body)
					}
					if tc.w.Header.Get("Stripe-Should-Retry") != tc.retryable {
						t.Fatalf("%s: Stripe-Should-Retry %q", tc.code, tc.w.Header.Get("Stripe-Should-Retry"))
					}
				default:
					if body["err"] != tc.code || body["msg"] == "" || body["retryable"] != (tc.retryable == "true") {
						t.Fatalf("%s: body %v", tc.code, body)
					}
				}
			}
		})
	}
}
