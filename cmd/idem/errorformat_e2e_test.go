package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --error-format against the built binary (issue 34 §5): the proxy's
// refusals in Stripe's error shape or a template, each with
// Idempotent-Retryable; a template that cannot run is refused at startup.
func TestE2EErrorFormat(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tmpl := filepath.Join(t.TempDir(), "error.tmpl")
	if err := os.WriteFile(tmpl, []byte(`{"fault":{"code":{{json .Code}},"retry":{{.Retryable}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"stripe", "template:" + tmpl} {
		p := startProxy(t, "--upstream", up.srv.URL, "--store", "memory:", "--error-format", format)
		key := "ef-" + filepath.Base(format)
		if a := post(t, p.url, key, "a"); a.status != 201 {
			t.Fatalf("%s: first %+v", format, a)
		}
		a := post(t, p.url, key, "another body")
		if a.status != 422 || a.header.Get("Content-Type") != "application/json" || a.header.Get("Idempotent-Retryable") != "false" {
			t.Fatalf("%s: key reused: %d %v %s", format, a.status, a.header, a.body)
		}
		var body map[string]map[string]any
		if err := json.Unmarshal([]byte(a.body), &body); err != nil {
			t.Fatalf("%s: %q: %v", format, a.body, err)
		}
		switch format {
		case "stripe":
			if e := body["error"]; e["type"] != "idempotency_error" || e["code"] != "key_reused" || e["message"] == "" || a.header.Get("Stripe-Should-Retry") != "false" {
				t.Fatalf("stripe: %v %v", body, a.header)
			}
		default:
			if f := body["fault"]; f["code"] != "key_reused" || f["retry"] != false {
				t.Fatalf("template: %v", body)
			}
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.tmpl")
	os.WriteFile(bad, []byte(`{{.NoSuchField}}`), 0o600)
	for _, format := range []string{"xml", "template:" + bad, "template:/does/not/exist"} {
		code, _, errOut := runCLI(t, "proxy", "--upstream", up.srv.URL, "--store", "memory:", "--error-format", format)
		if code != 2 || !strings.Contains(errOut, "--error-format") {
			t.Errorf("--error-format %s: exit %d, %q", format, code, errOut)
		}
	}
}
