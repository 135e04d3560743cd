package browser_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem/idemclient/browser"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(browser.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/idem.js")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" || !bytes.Equal(b.Bytes(), browser.Source) {
		t.Fatalf("%d %q %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), b.Len())
	}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 304 {
		t.Fatalf("If-None-Match: %d", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
}
