package apicheck

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Record is one recorded keyed request, a line of an NDJSON recording
// written by `idem proxy --record FILE` (or by anything else that writes
// the same lines, such as a webhook receiver's log).
//
// A recording never holds a credential: each header that identifies the
// caller (Authorization, or the headers the proxy scopes by) is replaced
// by a placeholder such as "{{authorization-1}}", the same for every
// request of one caller; `idem replay --credentials FILE` maps each
// placeholder to a staging value. The only other headers kept are
// Content-Type and Content-Encoding.
type Record struct {
	Time   time.Time `json:"t"`
	Millis int64     `json:"ms"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Query  string    `json:"query,omitempty"`
	// Key is the idempotency key (its value, without RFC 8941 quotes).
	Key string `json:"key"`
	// Scope is a digest of the caller's scope: two records with the same
	// Scope come from one caller. It is keyed by a secret of the recording
	// process, so it cannot be brute-forced back into a credential.
	Scope   string            `json:"scope"`
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the request body when it is UTF-8; BodyB64 otherwise.
	Body    string `json:"body,omitempty"`
	BodyB64 string `json:"body_b64,omitempty"`
	// BodyOmitted is set when the body was too large to record (or was not
	// read in full): such a record is not replayed.
	BodyOmitted bool `json:"body_omitted,omitempty"`
	Status      int  `json:"status"`
	Replayed    bool `json:"replayed,omitempty"`
}

// SetBody stores b in Body or BodyB64.
func (r *Record) SetBody(b []byte) {
	if utf8.Valid(b) {
		r.Body, r.BodyB64 = string(b), ""
		return
	}
	r.Body, r.BodyB64 = "", base64.StdEncoding.EncodeToString(b)
}

// BodyBytes returns the recorded body.
func (r *Record) BodyBytes() ([]byte, error) {
	if r.BodyB64 != "" {
		return base64.StdEncoding.DecodeString(r.BodyB64)
	}
	return []byte(r.Body), nil
}

// IsPlaceholder reports whether v is a credential placeholder.
func IsPlaceholder(v string) bool {
	return strings.HasPrefix(v, "{{") && strings.HasSuffix(v, "}}") && len(v) > 4
}

// ReadRecords reads an NDJSON recording. name is used in errors.
func ReadRecords(name string, r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if rec.Method == "" || !strings.HasPrefix(rec.Path, "/") || rec.Key == "" {
			return nil, fmt.Errorf("%s:%d: a record needs a method, a path starting with / and a key", name, line)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, errors.New(name + ": no records")
	}
	return out, nil
}

// CountRecords reads an NDJSON recording line by line, keeping none, and
// returns how many of its records can be replayed (those with a body): a
// replay checks its request budget with it before it reads the records
// into memory.
func CountRecords(name string, r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	n, line := 0, 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var rec struct {
			BodyOmitted bool `json:"body_omitted"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return 0, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if !rec.BodyOmitted {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}
