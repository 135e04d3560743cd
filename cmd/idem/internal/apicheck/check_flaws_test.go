package apicheck

// The checks that TestFlawsAreCaught and the verdict tests leave out, each
// against a server that is wrong in the one way the check looks for. The
// correct fake passes every one of them (TestCorrectFakePasses), so each
// verdict below is the flaw's doing.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestEachCheckCatchesItsFlaw: the mismatch variants, the replay's headers
// and marker, the key's two forms, the in-flight answer and the expiry,
// each against the fake with the flaw it names.
func TestEachCheckCatchesItsFlaw(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		flaws  flaws
		cfg    func(*Config)
		check  string
		status Status
		detail string
	}{
		{"ignores the query", flaws{ignoreQuery: true}, nil, "mismatch-query", Fail, "replayed for a different request"},
		{"ignores the path", flaws{ignorePath: true}, nil, "mismatch-path", Fail, "replayed for a different request"},
		{"ignores the method", flaws{ignoreMethod: true}, nil, "mismatch-method", Fail, "replayed for a different request"},
		{"moves Location on replay", flaws{moveLocation: true}, nil, "replay-headers", Fail, "Location"},
		{"marks the first answer", flaws{markAll: true}, nil, "replay-marker", Fail, "first response is marked"},
		{"two key forms", flaws{quotedKeys: true}, nil, "key-forms", Warn, "bare form was executed again"},
		{"409 without Retry-After", flaws{noRetryAfter: true}, func(c *Config) { c.Only = []string{"in-flight"} }, "in-flight", Warn, "without Retry-After"},
		{"no retention declared", flaws{}, func(c *Config) { c.Retention = "" }, "expiry", Warn, "no retention declared"},
		{"keeps keys past the declared retention", flaws{}, func(c *Config) { c.Only, c.Retention = []string{"expiry"}, "1s" }, "expiry", Warn, "still replays after it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := run(t, newFake(tc.flaws, &Naive{}), func(c *Config) {
				if tc.check != "in-flight" {
					c.SlowPath = "" // not this flaw's check: spare the slow request
				}
				if tc.cfg != nil {
					tc.cfg(c)
				}
			})
			want(t, rep, tc.check, tc.status, tc.detail)
		})
	}
}

// serveLax is an API behind no HTTP server's header checks: it reads each
// request itself and executes every one (a fresh id each time), whatever
// its key lines hold: nothing, 256 characters, a control character, two
// lines. (net/http's server refuses a control character in a header
// before any handler sees it, so a handler could not be this lax.)
func serveLax(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					_ = c.SetDeadline(time.Now().Add(time.Minute))
					// The head, line by line (http.ReadRequest refuses a
					// control character too), then Content-Length bytes.
					length, closing := 0, false
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						line = strings.TrimRight(line, "\r\n")
						if line == "" {
							break
						}
						name, value, _ := strings.Cut(line, ":")
						switch value = strings.TrimSpace(value); strings.ToLower(name) {
						case "content-length":
							length, _ = strconv.Atoi(value)
						case "connection":
							closing = strings.EqualFold(value, "close")
						}
					}
					if _, err := io.CopyN(io.Discard, br, int64(length)); err != nil {
						return
					}
					body := fmt.Sprintf(`{"id":"ch_%d"}`, n.Add(1))
					fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
					if closing {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestKeySyntaxAccepted: an API that takes any key line is caught by each
// key-syntax check: an empty key, a control character and two key lines
// FAIL, a 256-character key WARNs (a cap is common practice, not the
// draft's rule).
func TestKeySyntaxAccepted(t *testing.T) {
	t.Parallel()
	c := config(serveLax(t))
	c.Oracle = ""
	c.Only = []string{"key-empty", "key-too-long", "key-control", "key-two-lines"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, c, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want(t, rep, "key-empty", Fail, "accepted (201)")
	want(t, rep, "key-too-long", Warn, "accepted (201)", "255 characters")
	want(t, rep, "key-control", Fail, "accepted (201)")
	want(t, rep, "key-two-lines", Fail, "accepted (201)")
}

// TestEndpointHints: a refused first request is answered with the flag
// that fixes it, by what the API said.
func TestEndpointHints(t *testing.T) {
	t.Parallel()
	problem := http.Header{"Content-Type": {"application/problem+json"}}
	for _, tc := range []struct {
		status int
		header http.Header
		body   string
		want   string
	}{
		{http.StatusUnauthorized, nil, "", "--header 'Authorization"},
		{http.StatusForbidden, nil, "", "--header 'Authorization"},
		{http.StatusBadRequest, problem, `{"type":"https://idem.dev/problems/scope-required"}`, "answered 400 scope-required: the API wants to know the caller"},
		{http.StatusBadRequest, problem, `{"type":"https://idem.dev/problems/missing-key"}`, "check --key-header"},
		{http.StatusUnsupportedMediaType, nil, "", "check --body and --content-type"},
		{http.StatusRequestEntityTooLarge, nil, "", "shorten --body"},
		{http.StatusNotFound, nil, "", "check the URL's path prefix and --path"},
		{http.StatusMethodNotAllowed, nil, "", "check --method"},
		{http.StatusUnprocessableEntity, nil, "", "the API refused the request itself"},
		{http.StatusFound, http.Header{"Location": {"https://api.example/v2/charges"}}, "", "a redirect to https://api.example/v2/charges (never followed)"},
		{http.StatusBadGateway, nil, "", "the service failed"},
		{http.StatusTeapot, nil, "", "check the URL, --path, --body and --header"},
	} {
		ex := &exchange{status: tc.status, header: tc.header, body: []byte(tc.body)}
		if ex.header == nil {
			ex.header = http.Header{}
		}
		if got := endpointHint(ex); !strings.Contains(got, tc.want) {
			t.Errorf("%d %s: hint %q, want it to say %q", tc.status, tc.body, got, tc.want)
		}
	}
}
