package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/cmd/idem/internal/apicheck"
	"github.com/idemkit/idem/httpidem"
)

// recordBodyLimit is the largest request body a recording keeps; a larger
// one is marked body_omitted (and not replayed).
const recordBodyLimit = 1 << 20

// recorder writes the keyed requests that pass through the proxy to an
// NDJSON file (`idem proxy --record FILE`), one apicheck.Record a line,
// for `idem replay`. Credentials never reach the file: every header that
// identifies the caller (Authorization and the --scope-header headers) is
// replaced by a placeholder that is the same for every request with that
// value, and the scope is kept only as a digest keyed by a secret that
// lives and dies with this process. No other header is kept but
// Content-Type and Content-Encoding.
//
// Query strings are redacted like headers: the value of every parameter
// whose name says it carries a secret (secretParam) is replaced by a
// placeholder. The key is kept as a keyed digest ("h-…", the same for
// every request of one caller's key, so that replay still groups them)
// unless --record-raw-keys asks for it as sent. The path is recorded as
// the client sent it (escaped: /a%2Fb stays /a%2Fb). The file is made
// readable by its owner only (0600), an existing file included.
//
// The file is capped at max bytes: when the next line would pass the cap,
// FILE becomes FILE.1 (FILE.1 becomes FILE.2, up to keep files; the
// oldest is deleted) and a new FILE starts.
type recorder struct {
	path    string
	max     int64
	keep    int
	methods []string
	creds   []string // canonical header names replaced by placeholders
	rawKeys bool     // --record-raw-keys: keep the keys as sent
	scope   httpidem.ScopeFunc
	secret  [32]byte
	logger  *slog.Logger
	mu      sync.Mutex
	f       *os.File
	size    int64
	names   map[string]string // HMAC of a credential → its placeholder
	count   map[string]int    // per header name
	failed  bool              // a write failed (logged once)
	closed  bool
}

func newRecorder(path string, max int64, keep int, o proxyOptions, logger *slog.Logger) (*recorder, error) {
	rc := &recorder{path: path, max: max, keep: keep, methods: o.methods, logger: logger, rawKeys: o.recordRawKeys,
		scope: proxyScopeFunc(o.scopeHeaders, true), names: map[string]string{}, count: map[string]int{}}
	for _, h := range append([]string{"Authorization"}, o.scopeHeaders...) {
		if c := textproto.CanonicalMIMEHeaderKey(h); !slices.Contains(rc.creds, c) {
			rc.creds = append(rc.creds, c)
		}
	}
	if _, err := rand.Read(rc.secret[:]); err != nil {
		return nil, err
	}
	if err := rc.open(); err != nil {
		return nil, fmt.Errorf("--record: %w", err)
	}
	return rc, nil
}

func (rc *recorder) open() error {
	f, err := os.OpenFile(rc.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// O_CREATE's mode applies to a new file only: an existing one (made by
	// an editor, a previous run under another umask) is narrowed too.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	rc.f, rc.size = f, st.Size()
	return nil
}

// rotate moves FILE to FILE.1 (and so on) and opens a new FILE.
func (rc *recorder) rotate() error {
	if err := rc.f.Close(); err != nil {
		return err
	}
	if rc.keep == 0 {
		if err := os.Remove(rc.path); err != nil {
			return err
		}
		return rc.open()
	}
	os.Remove(fmt.Sprintf("%s.%d", rc.path, rc.keep))
	for i := rc.keep - 1; i >= 1; i-- {
		from := fmt.Sprintf("%s.%d", rc.path, i)
		if _, err := os.Stat(from); err == nil {
			if err := os.Rename(from, fmt.Sprintf("%s.%d", rc.path, i+1)); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(rc.path, rc.path+".1"); err != nil {
		return err
	}
	return rc.open()
}

// Close closes the file; requests that end later are not recorded.
func (rc *recorder) Close() error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed {
		return nil
	}
	rc.closed = true
	return rc.f.Close()
}

func (rc *recorder) mac(parts ...string) string {
	m := hmac.New(sha256.New, rc.secret[:])
	for _, p := range parts {
		fmt.Fprintf(m, "%d:%s", len(p), p)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// placeholder returns the stable placeholder of one credential value;
// rc.mu is held.
func (rc *recorder) placeholder(name, value string) string {
	h := rc.mac(name, value)
	if p, ok := rc.names[h]; ok {
		return p
	}
	lower := strings.ToLower(name)
	if len(rc.names) >= 1<<16 { // bounded memory: past it, a keyed digest
		return "{{" + lower + "-" + h[:12] + "}}"
	}
	rc.count[lower]++
	p := fmt.Sprintf("{{%s-%d}}", lower, rc.count[lower])
	rc.names[h] = p
	return p
}

// wrap records the keyed requests of the protected methods.
func (rc *recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := r.Header.Get("Idempotency-Key")
		if raw == "" || !slices.Contains(rc.methods, r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		rec := apicheck.Record{Time: start.UTC(), Method: r.Method, Path: r.URL.EscapedPath(), Key: raw}
		if k, err := httpidem.ParseKey(raw); err == nil {
			rec.Key = k
		}
		scope := ""
		if s, err := rc.scope(r); err == nil && s != "" {
			scope = s
			rec.Scope = rc.mac("scope", s)[:16]
		} else {
			rec.Scope = "anonymous"
		}
		if !rc.rawKeys {
			rec.Key = "h-" + rc.mac("key", scope, rec.Key)[:32]
		}
		tee := &capture{r: r.Body, limit: recordBodyLimit}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = tee
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)

		rec.Millis = time.Since(start).Milliseconds()
		rec.Status = sw.status
		if rec.Status == 0 {
			rec.Status = http.StatusOK
		}
		rec.Replayed = sw.Header().Get("Idempotent-Replayed") == "true"
		whole := tee.eof || int64(tee.buf.Len()) == r.ContentLength || r.ContentLength == 0
		if tee.over || !whole {
			rec.BodyOmitted = true
		} else {
			rec.SetBody(tee.buf.Bytes())
		}
		rc.write(r, &rec)
	})
}

func (rc *recorder) write(r *http.Request, rec *apicheck.Record) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed {
		return
	}
	rec.Query = rc.redactQuery(r.URL.RawQuery)
	rec.Headers = map[string]string{}
	for _, name := range rc.creds {
		if vs := r.Header.Values(name); len(vs) > 0 {
			rec.Headers[name] = rc.placeholder(name, strings.Join(vs, "\x00"))
		}
	}
	for _, name := range []string{"Content-Type", "Content-Encoding"} {
		if v := r.Header.Get(name); v != "" && !slices.Contains(rc.creds, name) {
			rec.Headers[name] = v
		}
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return
	}
	line = append(line, '\n')
	if rc.size > 0 && rc.size+int64(len(line)) > rc.max {
		if err := rc.rotate(); err != nil {
			rc.fail(err)
			return
		}
	}
	n, err := rc.f.Write(line)
	rc.size += int64(n)
	if err != nil {
		rc.fail(err)
	}
}

func (rc *recorder) fail(err error) {
	if !rc.failed {
		rc.failed = true
		rc.logger.Error("--record: cannot write the recording; requests are still served", "error", err.Error())
	}
}

// capture keeps a copy of what the handler reads of a body, up to limit.
type capture struct {
	r     io.ReadCloser
	buf   bytes.Buffer
	limit int
	over  bool
	eof   bool
}

func (c *capture) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.over {
		if c.buf.Len()+n > c.limit {
			c.over = true
			c.buf.Reset()
		} else {
			c.buf.Write(p[:n])
		}
	}
	if err == io.EOF {
		c.eof = true
	}
	return n, err
}

func (c *capture) Close() error { return c.r.Close() }

// statusWriter notes the status code; Unwrap lets http.ResponseController
// reach the writer underneath.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// secretWords are the words of a query parameter's name that mark its
// value as a secret: access_token, api_key, client_secret, password,
// X-Amz-Signature, sig, auth, session_id, jwt… A name is split into words
// at every character that is not a letter or a digit, and also matches
// when, whole and lower-cased, it ends with one of the longer words
// (apikey, accesstoken). Over-redaction costs a placeholder to map at
// replay; a missed secret would be written to disk.
var secretWords = []string{"token", "secret", "password", "passwd", "pwd", "passphrase", "signature", "sig",
	"key", "apikey", "auth", "authorization", "credential", "credentials", "session", "sessionid", "sid", "jwt",
	"otp", "pin", "cookie", "security"}

var secretSuffixes = []string{"token", "secret", "password", "signature", "apikey", "key", "credential", "session"}

// secretParam reports whether a query parameter named name carries a
// secret.
func secretParam(name string) bool {
	lower := strings.ToLower(name)
	for _, w := range strings.FieldsFunc(lower, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	}) {
		if slices.Contains(secretWords, w) {
			return true
		}
	}
	for _, suf := range secretSuffixes {
		if strings.HasSuffix(lower, suf) {
			return true
		}
	}
	return false
}

// redactQuery returns raw with the value of every secret parameter
// replaced by its placeholder ({{query-NAME-N}}, the same for every
// request with that value), the rest as sent; rc.mu is held.
func (rc *recorder) redactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	for i, part := range parts {
		name, value, hasValue := strings.Cut(part, "=")
		n, err := url.QueryUnescape(name)
		if err != nil {
			n = name
		}
		if !secretParam(n) {
			continue
		}
		if !hasValue || value == "" {
			continue // no value: nothing to hide
		}
		v, err := url.QueryUnescape(value)
		if err != nil {
			v = value
		}
		parts[i] = name + "=" + url.QueryEscape(rc.placeholder("query-"+n, v))
	}
	return strings.Join(parts, "&")
}
