package idemclient_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemclient"
)

// canned answers every request in-process with 201 and a short body, so
// that a benchmark measures the client alone.
type canned struct{}

func (canned) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{"ok":true}`)), Request: r, ContentLength: 11}, nil
}

// BenchmarkClient: one POST with a small body, through a bare http.Client
// and through idemclient over the same inner transport: in-process (the
// client's own cost) and over loopback to an httptest server.
func BenchmarkClient(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(201)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	loop := &http.Transport{MaxIdleConnsPerHost: 4}
	defer loop.CloseIdleConnections()
	for _, inner := range []struct {
		name string
		rt   http.RoundTripper
		url  string
	}{{"inproc", canned{}, "http://service.test/charges"}, {"loopback", loop, srv.URL + "/charges"}} {
		tr, err := idemclient.New(&idemclient.Config{Transport: inner.rt})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name   string
			client *http.Client
		}{{"bare", &http.Client{Transport: inner.rt}}, {"idemclient", &http.Client{Transport: tr}}} {
			b.Run(inner.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req, _ := http.NewRequest(http.MethodPost, inner.url, strings.NewReader(`{"amount":5}`))
					resp, err := c.client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}
