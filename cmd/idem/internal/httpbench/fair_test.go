package httpbench

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/memstore"
)

// TestSameWireBytes keeps BenchmarkRatio fair: over a raw connection, the
// bare handler and the middleware's first answer are the same bytes on
// the wire (apart from the Date, the generated id and the order of the
// header lines), so neither side sends more; a replay differs only by the
// Idempotent-Replayed line.
func TestSameWireBytes(t *testing.T) {
	store := memstore.New(nil)
	defer store.Close()
	bare := httptest.NewServer(Handler())
	defer bare.Close()
	mw := httptest.NewServer(middleware(t, store))
	defer mw.Close()

	raw := func(srv *httptest.Server, key string) string {
		t.Helper()
		u, _ := url.Parse(srv.URL)
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		body := `{"amount":4200,"currency":"EUR","description":"benchmark order"}`
		req := "POST /charges HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\nAuthorization: Bearer sk_bench\r\nIdempotency-Key: " + key +
			"\r\nContent-Length: 64\r\n\r\n" + body
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		// Read the head, then Content-Length bytes (50 here).
		br := bufio.NewReader(c)
		var head bytes.Buffer
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			head.WriteString(line)
			if line == "\r\n" {
				break
			}
		}
		m := regexp.MustCompile(`Content-Length: (\d+)`).FindStringSubmatch(head.String())
		if m == nil {
			t.Fatalf("no Content-Length in %q", head.String())
		}
		var n int
		for _, d := range m[1] {
			n = 10*n + int(d-'0')
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatal(err)
		}
		// Header lines sorted: net/http writes Content-Length and Date after
		// the handler's own headers when it computes them itself, which
		// changes their order but not the bytes sent.
		lines := strings.Split(strings.TrimSuffix(head.String(), "\r\n\r\n"), "\r\n")
		slices.Sort(lines[1:])
		s := strings.Join(lines, "\r\n") + "\r\n\r\n" + string(b)
		s = regexp.MustCompile(`Date: [^\r]*`).ReplaceAllString(s, "Date: D")
		return regexp.MustCompile(`ch_\d+`).ReplaceAllString(s, "ch_N")
	}
	want := raw(bare, "k1")
	if got := raw(mw, "k1"); got != want {
		t.Errorf("middleware first answer\n%q\nbare handler\n%q", got, want)
	}
	replay := raw(mw, "k1")
	if got := bytes.Replace([]byte(replay), []byte("Idempotent-Replayed: true\r\n"), nil, 1); string(got) != want {
		t.Errorf("replay minus Idempotent-Replayed\n%q\nbare handler\n%q", got, want)
	}
}
