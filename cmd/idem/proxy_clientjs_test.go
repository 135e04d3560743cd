package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemclient/browser"
)

// --client-js serves idem.js at its path (GET and HEAD) and nothing else:
// other paths, and other methods on that path, reach the service.
func TestE2EClientJS(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", "memory:", "--client-js", "/_idem/idem.js")
	resp, err := client.Get(p.url + "/_idem/idem.js")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(b, browser.Source) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("GET: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
	}
	a := post(t, p.url, "k-js", "x") // to /charges: proxied
	if a.status != 201 || up.count("k-js") != 1 {
		t.Fatalf("POST elsewhere: %d, %d calls", a.status, up.count("k-js"))
	}
	req, _ := http.NewRequest(http.MethodPost, p.url+"/_idem/idem.js", strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer t")
	req.Header.Set("Idempotency-Key", "k-js-2")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || up.count("k-js-2") != 1 {
		t.Fatalf("POST to the path: %d, %d calls", resp.StatusCode, up.count("k-js-2"))
	}

	if code, _, stderr := runCLI(t, "proxy", "--upstream", up.srv.URL, "--client-js", "idem.js"); code != 2 || !strings.Contains(stderr, "--client-js") {
		t.Fatalf("a path without / : exit %d, %q", code, stderr)
	}
}
