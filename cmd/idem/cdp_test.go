package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// A headless Chromium driven over the DevTools protocol, with a WebSocket
// client of a few lines (the standard library has none), so that the
// operations page is tested by a real browser running its real script.

// oneShot is an HTTP client that keeps no connection open (goleak).
var oneShot = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

type chromeTab struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	id   int
}

var devtoolsLine = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// startChromium starts headless Chromium and attaches to its first page.
func startChromium(t *testing.T) *chromeTab {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := testenv.Chromium(ctx, t, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait, not the reader, decides when Chromium is gone: it closes the
	// pipe once the process group is dead (testenv.Chromium), so a helper
	// that kept stderr open cannot hold the test's cleanup.
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := devtoolsLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	var wsURL string
	select {
	case wsURL = <-found:
	case <-time.After(60 * time.Second):
		t.Fatal("chromium printed no DevTools address within a minute")
	}
	u, err := url.Parse(wsURL)
	if err != nil {
		t.Fatal(err)
	}
	// The page target, from the HTTP side of the DevTools endpoint.
	var targets []struct {
		Type string `json:"type"`
		WS   string `json:"webSocketDebuggerUrl"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := oneShot.Get("http://" + u.Host + "/json/list")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
		}
		if err == nil && len(targets) > 0 && targets[0].Type == "page" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no page target: %v %+v", err, targets)
		}
		time.Sleep(100 * time.Millisecond)
	}
	page, err := url.Parse(targets[0].WS)
	if err != nil {
		t.Fatal(err)
	}
	b := &chromeTab{t: t}
	b.dial(page)
	t.Cleanup(func() { b.conn.Close() })
	return b
}

// dial opens the WebSocket (RFC 6455) to a DevTools target.
func (b *chromeTab) dial(u *url.URL) {
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		b.t.Fatal(err)
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		u.RequestURI(), u.Host, base64.StdEncoding.EncodeToString(nonce[:]))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		b.t.Fatalf("websocket handshake: %v %v", resp, err)
	}
	b.conn, b.r = conn, r
}

func (b *chromeTab) writeText(p []byte) error {
	hdr := []byte{0x81} // FIN, text
	switch n := len(p); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 1<<16:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = binary.BigEndian.AppendUint64(append(hdr, 0x80|127), uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	masked := make([]byte, len(p))
	for i := range p {
		masked[i] = p[i] ^ mask[i%4]
	}
	_, err := b.conn.Write(append(hdr, masked...))
	return err
}

// readMessage reads one whole message (joining continuation frames).
func (b *chromeTab) readMessage() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(b.r, h[:]); err != nil {
			return nil, err
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var l [2]byte
			if _, err := io.ReadFull(b.r, l[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(l[:]))
		case 127:
			var l [8]byte
			if _, err := io.ReadFull(b.r, l[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(l[:])
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(b.r, p); err != nil {
			return nil, err
		}
		switch op := h[0] & 0x0f; op {
		case 0x8:
			return nil, errors.New("websocket closed")
		case 0x9, 0xa: // ping, pong: nothing to do for a test client
			continue
		}
		msg = append(msg, p...)
		if h[0]&0x80 != 0 {
			return msg, nil
		}
	}
}

// call sends a DevTools command and returns its result.
func (b *chromeTab) call(method string, params any) json.RawMessage {
	b.t.Helper()
	b.id++
	req, _ := json.Marshal(map[string]any{"id": b.id, "method": method, "params": params})
	_ = b.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := b.writeText(req); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	for {
		msg, err := b.readMessage()
		if err != nil {
			b.t.Fatalf("%s: %v", method, err)
		}
		var resp struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg, &resp); err != nil || resp.ID != b.id {
			continue // an event, or the answer to an earlier command
		}
		if resp.Error != nil {
			b.t.Fatalf("%s: %s", method, resp.Error.Message)
		}
		return resp.Result
	}
}

// eval runs expr in the page (awaiting a promise) and returns its value
// as JSON.
func (b *chromeTab) eval(expr string) json.RawMessage {
	b.t.Helper()
	res := b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	var out struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &out); err != nil {
		b.t.Fatal(err)
	}
	if out.Exception != nil {
		b.t.Fatalf("%s: %s %s", expr, out.Exception.Text, out.Exception.Exception.Description)
	}
	return out.Result.Value
}

// waitFor evaluates expr until it is true.
func (b *chromeTab) waitFor(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !bytes.Equal(b.eval(expr), []byte("true")) {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s (%s); page text:\n%s", what, expr, b.eval("document.body.innerText"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *chromeTab) text(sel string) string {
	b.t.Helper()
	var s string
	_ = json.Unmarshal(b.eval(fmt.Sprintf("document.querySelector(%q).innerText", sel)), &s)
	return s
}

func (b *chromeTab) navigate(u string) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": u})
	b.waitFor("the page to load", `document.readyState === "complete"`)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return strings.TrimSpace(string(b))
}
