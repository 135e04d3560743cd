// What a result shows of the requests a check sent.

package apicheck

import (
	"fmt"
	"sort"
	"strings"
)

func statusSummary(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%d", m[k], k)
	}
	return strings.Join(parts, ", ")
}

func describe(ex *exchange) string {
	if ex.err != nil {
		return ex.err.Error()
	}
	return fmt.Sprintf("answered %d", ex.status)
}

// shownHeaders are the response headers kept as evidence.
var shownHeaders = []string{"Content-Type", "Location", "Retry-After", "Set-Cookie"}

func evidence(ex *exchange) Evidence {
	e := Evidence{Request: describeRequest(ex.req), Status: ex.status, Millis: ex.elapsed.Milliseconds()}
	if ex.err != nil {
		e.Error = ex.err.Error()
		e.Timing = ex.timing()
	}
	for _, h := range shownHeaders {
		if v := ex.header.Get(h); v != "" {
			if e.Headers == nil {
				e.Headers = map[string]string{}
			}
			if h == "Set-Cookie" {
				name, _, _ := strings.Cut(v, "=")
				v = name + "=…"
			}
			e.Headers[h] = v
		}
	}
	if m := markerName(ex.header); m != "" {
		if e.Headers == nil {
			e.Headers = map[string]string{}
		}
		name, v, _ := strings.Cut(m, ": ")
		e.Headers[name] = v
	}
	b := ex.body
	if len(b) > 200 {
		b = append(b[:200:200], "…"...)
	}
	e.Body = string(b)
	return e
}

func describeRequest(r request) string {
	var b strings.Builder
	b.WriteString(r.method + " " + r.path)
	if r.key != "" {
		fmt.Fprintf(&b, "  key %s", r.key)
	} else {
		b.WriteString("  (no key)")
	}
	if r.callerB {
		b.WriteString("  as caller B")
	}
	if r.body != "" {
		body := r.body
		if len(body) > 80 {
			body = body[:80] + "…"
		}
		fmt.Fprintf(&b, "  body %s", body)
	}
	return b.String()
}

func plural(n int64, noun string) string { return Plural(int(n), noun) }
