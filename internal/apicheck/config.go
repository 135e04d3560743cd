package apicheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"time"
)

// Placeholder in Config.Body is replaced by a fresh random value for every
// logical request, so that two checks never collide on one business key.
const Placeholder = "{{unique}}"

// Config describes the API under test. A zero field takes its default.
type Config struct {
	// URL is the base URL (scheme and host, optionally a path prefix).
	// Every request goes to this origin and nowhere else.
	URL string `json:"url"`
	// Method and Path name the endpoint; default POST and "/".
	Method string `json:"method"`
	Path   string `json:"path"`
	// Body is the request body template; Placeholder becomes a unique value.
	// Default {"amount":100,"reference":"{{unique}}"}.
	Body string `json:"body"`
	// ContentType of Body; default application/json.
	ContentType string `json:"content_type"`
	// Headers are sent on every request ("Name: value"), e.g. the first
	// caller's credentials.
	Headers []string `json:"headers"`
	// OtherHeaders are a second caller's credentials, for the scope checks.
	OtherHeaders []string `json:"other_headers"`
	// KeyHeader names the key header; default Idempotency-Key.
	KeyHeader string `json:"key_header"`
	// RequireKey declares that the endpoint refuses requests without a key.
	RequireKey bool `json:"require_key"`
	// SlowPath is a path (and query) of a slow variant of the endpoint,
	// slow enough (≥ 1s) that a duplicate arrives while the first runs.
	SlowPath string `json:"slow_path"`
	// FailPath is a path (and query) of a variant that answers 5xx.
	FailPath string `json:"fail_path"`
	// MismatchQuery, MismatchPath and MismatchMethod name the variants of
	// the endpoint that the mismatch-query, -path and -method checks send
	// under a used key: a query string ("a=1", sent on Path), another path
	// on the base URL that takes the same requests, another method the
	// endpoint takes. Each check runs only when its variant is named: the
	// checker sends nothing to a path or method the user did not give.
	MismatchQuery  string `json:"mismatch_query"`
	MismatchPath   string `json:"mismatch_path"`
	MismatchMethod string `json:"mismatch_method"`
	// Only and Skip select checks by id (see CheckIDs). The endpoint check
	// always runs: without a working first request no check means anything.
	Only []string `json:"only"`
	Skip []string `json:"skip"`
	// StoresFailures declares that the API stores 5xx answers and replays
	// them (Stripe's documented behaviour) instead of letting retries run.
	StoresFailures bool `json:"stores_failures"`
	// Oracle tells how to count effects: "id:/json/pointer" (the resource
	// id in each 2xx body), "count:/path#/json/pointer" (a GET on the same
	// origin returning a count), or "cmd:shell command" (prints a count).
	// Default: compare the 2xx bodies.
	Oracle string `json:"oracle"`
	// Concurrency is the number of simultaneous first requests; default 8.
	Concurrency int `json:"concurrency"`
	// Retention is the retention the API documents, e.g. "24h"; empty when
	// undocumented. A retention up to MaxWait is verified by waiting.
	Retention string `json:"retention"`
	// MaxWait bounds how long the expiry check may wait; default 30s.
	MaxWait Duration `json:"max_wait"`
	// MaxRequests bounds the requests sent; default 200.
	MaxRequests int `json:"max_requests"`
	// Rate bounds requests per second; default 50.
	Rate float64 `json:"rate"`
	// Timeout bounds each request; default 10s.
	Timeout Duration `json:"timeout"`

	base      *url.URL
	headers   [][2]string
	other     [][2]string
	retention time.Duration
	oracle    oracle
	selected  map[string]bool
}

// CheckIDs are the ids of the checks, in the order they run.
var CheckIDs = []string{
	"endpoint",
	"replay-body", "replay-effect", "replay-headers", "replay-marker", "replay-cookie",
	"mismatch-body", "mismatch-query", "mismatch-path", "mismatch-method",
	"key-required", "key-empty", "key-too-long", "key-control", "key-two-lines", "key-forms",
	"concurrency", "in-flight", "scope-replay", "scope-reveal", "failure-policy", "expiry",
}

// selectChecks returns the set of checks to run.
func selectChecks(only, skip []string) (map[string]bool, error) {
	known := map[string]bool{}
	for _, id := range CheckIDs {
		known[id] = true
	}
	split := func(flag string, list []string) ([]string, error) {
		var out []string
		for _, l := range list {
			for id := range strings.SplitSeq(l, ",") {
				id = strings.TrimSpace(id)
				if id == "" {
					continue
				}
				if !known[id] {
					return nil, fmt.Errorf("%s %q: no such check (want %s)", flag, id, strings.Join(CheckIDs, ", "))
				}
				out = append(out, id)
			}
		}
		return out, nil
	}
	o, err := split("only", only)
	if err != nil {
		return nil, err
	}
	s, err := split("skip", skip)
	if err != nil {
		return nil, err
	}
	sel := map[string]bool{}
	for _, id := range CheckIDs {
		sel[id] = len(o) == 0
	}
	for _, id := range o {
		sel[id] = true
	}
	for _, id := range s {
		if id == "endpoint" {
			return nil, errors.New("skip endpoint: the first request is every check's precondition")
		}
		sel[id] = false
	}
	sel["endpoint"] = true
	return sel, nil
}

// Duration is a time.Duration that reads "10s" from JSON.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"10s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// LoadFile reads a Config from a JSON file.
func LoadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// normalize fills in the defaults and validates c.
func (c Config) normalize() (*Config, error) {
	if c.URL == "" {
		return nil, errors.New("the base URL is required")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base URL %q: want http://host[:port][/prefix]", redactURL(c.URL))
	}
	if u.User != nil {
		return nil, errors.New("base URL: put credentials in headers, not in the URL")
	}
	u.RawQuery, u.Fragment = "", ""
	u.Path = strings.TrimSuffix(u.Path, "/")
	c.base = u
	if c.Method == "" {
		c.Method = "POST"
	}
	c.Method = strings.ToUpper(c.Method)
	if c.Path == "" {
		c.Path = "/"
	}
	for _, p := range []*string{&c.Path, &c.SlowPath, &c.FailPath, &c.MismatchPath} {
		if *p != "" && !strings.HasPrefix(*p, "/") {
			return nil, fmt.Errorf("path %q: want a path on the base URL, starting with /", *p)
		}
	}
	c.MismatchQuery = strings.TrimPrefix(c.MismatchQuery, "?")
	if strings.ContainsAny(c.MismatchQuery, "#/ ") {
		return nil, fmt.Errorf("mismatch-query %q: want a query string such as a=1", c.MismatchQuery)
	}
	c.MismatchMethod = strings.ToUpper(c.MismatchMethod)
	if c.MismatchMethod != "" && c.MismatchMethod == c.Method {
		return nil, fmt.Errorf("mismatch-method %s: want another method than the endpoint's", c.MismatchMethod)
	}
	if c.MismatchPath != "" && c.MismatchPath == c.Path {
		return nil, fmt.Errorf("mismatch-path %s: want another path than the endpoint's", c.MismatchPath)
	}
	if c.selected, err = selectChecks(c.Only, c.Skip); err != nil {
		return nil, err
	}
	if c.Body == "" {
		c.Body = `{"amount":100,"reference":"` + Placeholder + `"}`
	}
	if c.ContentType == "" {
		c.ContentType = "application/json"
	}
	if c.KeyHeader == "" {
		c.KeyHeader = "Idempotency-Key"
	}
	c.KeyHeader = textproto.CanonicalMIMEHeaderKey(c.KeyHeader)
	if c.headers, err = parseHeaders(c.Headers); err != nil {
		return nil, err
	}
	if c.other, err = parseHeaders(c.OtherHeaders); err != nil {
		return nil, err
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.Concurrency < 2 || c.Concurrency > 64 {
		return nil, errors.New("concurrency: want 2 to 64")
	}
	if c.Retention != "" {
		if c.retention, err = time.ParseDuration(c.Retention); err != nil || c.retention <= 0 {
			return nil, fmt.Errorf("retention %q: want a positive duration such as 24h", c.Retention)
		}
	}
	if c.MaxWait == 0 {
		c.MaxWait = Duration(30 * time.Second)
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = 200
	}
	if c.MaxRequests < 10 {
		return nil, errors.New("max-requests: want at least 10")
	}
	if c.Rate == 0 {
		c.Rate = 50
	}
	if c.Rate < 0 {
		return nil, errors.New("rate: want a positive number of requests per second")
	}
	if c.Timeout == 0 {
		c.Timeout = Duration(10 * time.Second)
	}
	if c.oracle, err = parseOracle(c.Oracle); err != nil {
		return nil, err
	}
	return &c, nil
}

func parseHeaders(lines []string) ([][2]string, error) {
	out := make([][2]string, 0, len(lines))
	for _, l := range lines {
		name, value, ok := strings.Cut(l, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("header %q: want \"Name: value\"", redactHeader(l))
		}
		out = append(out, [2]string{textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value)})
	}
	return out, nil
}

// redactHeader keeps a header's name only: header values are credentials.
func redactHeader(l string) string {
	if name, _, ok := strings.Cut(l, ":"); ok {
		return name + ": …"
	}
	if len(l) > 12 {
		return l[:12] + "…"
	}
	return l
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
