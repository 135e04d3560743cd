package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
)

// recordView is a record as 'idem keys get/list --json' and the proxy's
// operations API show it: the record, and its result decoded when it is an
// HTTP response (the proxy's and httpidem's records) or Do's marker.
type recordView struct {
	Digest      string     `json:"digest"`
	State       string     `json:"state"`
	Fence       uint64     `json:"fence"`
	Fingerprint string     `json:"fingerprint"`
	Started     bool       `json:"started"`
	CreatedAt   time.Time  `json:"created_at"`
	AgeSeconds  float64    `json:"age_seconds"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	ExpiresAt   time.Time  `json:"expires_at"`
	// LeaseExpired: in progress and its lease ran out (by this process's
	// clock): the holder died, and the next retry takes it over.
	LeaseExpired bool `json:"lease_expired,omitempty"`
	Expired      bool `json:"expired,omitempty"`

	// Request and ScopeDigest, for held HTTP records written by this
	// release (see httpidem.StoredResponse).
	Request     string `json:"request,omitempty"`
	ScopeDigest string `json:"scope_digest,omitempty"`
	// Step is the step of an operation of steps (package step) a held
	// key is held in, and StepsFinished the steps that finished before
	// it, as the held record names them (idem.HeldStep).
	Step          string   `json:"step,omitempty"`
	StepsFinished []string `json:"steps_finished,omitempty"`

	// ResultBytes is the stored result's size; -1 when the listing did
	// not read it.
	ResultBytes int           `json:"result_bytes"`
	Response    *responseView `json:"response,omitempty"`
	// Result is a result that is not an HTTP record (Do's JSON), as text
	// when it is valid UTF-8; ResultHex otherwise (the first bytes).
	Result    string `json:"result,omitempty"`
	ResultHex string `json:"result_hex,omitempty"`
	// Kind says what wrote the result: "http", "do" or "" (unknown).
	Kind string `json:"kind,omitempty"`
}

type responseView struct {
	Status         int         `json:"status"`
	Header         http.Header `json:"headers"`
	Body           string      `json:"body,omitempty"`        // text bodies
	BodyBase64     string      `json:"body_base64,omitempty"` // binary bodies, whole
	BodyBytes      int         `json:"body_bytes"`
	Binary         bool        `json:"binary,omitempty"`
	NotReplayable  bool        `json:"not_replayable,omitempty"`
	OutcomeUnknown bool        `json:"outcome_unknown,omitempty"`
}

// newRecordView describes r (with its result, if read) at now.
func newRecordView(r idem.Record, withResult bool, now time.Time) recordView {
	v := recordView{
		Digest:      r.Digest.String(),
		State:       r.State.String(),
		Fence:       r.Fence,
		Fingerprint: r.Fingerprint.String(),
		Started:     r.Started,
		CreatedAt:   r.CreatedAt.UTC(),
		AgeSeconds:  max(now.Sub(r.CreatedAt), 0).Seconds(),
		ExpiresAt:   r.ExpiresAt.UTC(),
		Expired:     !r.ExpiresAt.After(now),
		ResultBytes: -1,
	}
	if r.State == idem.StateInProgress {
		lu := r.LeaseUntil.UTC()
		v.LeaseUntil = &lu
		v.LeaseExpired = !r.LeaseUntil.After(now)
	}
	if !withResult || (r.State != idem.StateCompleted && r.State != idem.StateHeld) {
		return v
	}
	v.ResultBytes = len(r.Result)
	if resp, err := httpidem.DecodeResponse(r.Result); err == nil {
		v.Kind = "http"
		v.Request, v.ScopeDigest = resp.Request, resp.ScopeDigest
		v.Step, v.StepsFinished = resp.Step.Name, resp.Step.Finished
		rv := &responseView{Status: resp.Status, Header: resp.Header, BodyBytes: len(resp.Body), NotReplayable: resp.NotReplayable, OutcomeUnknown: resp.OutcomeUnknown}
		if isText(resp.Body) {
			rv.Body = string(resp.Body)
		} else {
			rv.Binary = true
			rv.BodyBase64 = base64.StdEncoding.EncodeToString(resp.Body)
		}
		v.Response = rv
		return v
	}
	switch {
	case string(r.Result) == string(idem.OutcomeUnknownResult()):
		v.Kind = "do"
		v.Result = "(outcome unknown: idem.Do's marker)"
	case idem.IsOutcomeUnknownResult(r.Result):
		h, _ := idem.HeldStepOf(r.Result)
		v.Kind = "do"
		v.Step, v.StepsFinished = h.Name, h.Finished
		v.Result = "(outcome unknown: held in a step by step.Do)"
	case string(r.Result) == string(idem.NotReplayableResult()):
		v.Kind = "do"
		v.Result = "(not replayable: idem.Do's marker)"
	case isText(r.Result):
		v.Result = string(r.Result)
	default:
		v.ResultHex = hex.EncodeToString(r.Result[:min(len(r.Result), 256)])
	}
	return v
}

// printable is name as a terminal shows it safely in one cell: as it is
// when it is printable with no spaces, quoted (Go syntax, escapes for
// control characters) otherwise. Step names come from the service's code
// and are at most step.MaxName bytes.
func printable(name string) string {
	for _, c := range name {
		if !unicode.IsPrint(c) || unicode.IsSpace(c) || c == '"' || c == ',' {
			return strconv.Quote(name)
		}
	}
	return name
}

// isText reports whether b reads as text: valid UTF-8 without control
// characters other than tab, newline and carriage return.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range string(b) {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}

// printRecordView prints v for a person: the record, then its decoded
// result. Bodies longer than maxText are cut; binary bodies are shown as a
// hex dump of their first 256 bytes.
func printRecordView(w io.Writer, v recordView) {
	row := func(k, f string, a ...any) { fmt.Fprintf(w, "%-12s "+f+"\n", append([]any{k + ":"}, a...)...) }
	state := v.State
	switch {
	case v.Expired:
		state += " (expired)"
	case v.LeaseExpired:
		state += " (lease expired)"
	}
	row("digest", "%s", v.Digest)
	row("state", "%s", state)
	row("fence", "%d", v.Fence)
	row("fingerprint", "%s", v.Fingerprint)
	row("created", "%s (%s ago)", v.CreatedAt.Format(time.RFC3339Nano), age(v.AgeSeconds))
	if v.LeaseUntil != nil {
		row("lease until", "%s", v.LeaseUntil.Format(time.RFC3339Nano))
	}
	row("started", "%t", v.Started)
	row("expires", "%s", v.ExpiresAt.Format(time.RFC3339Nano))
	if v.Request != "" {
		row("request", "%s", v.Request)
	}
	if v.ScopeDigest != "" {
		row("scope digest", "%s", v.ScopeDigest)
	}
	if v.Step != "" {
		row("held step", "%s", printable(v.Step))
		if len(v.StepsFinished) > 0 {
			names := make([]string, len(v.StepsFinished))
			for i, n := range v.StepsFinished {
				names[i] = printable(n)
			}
			row("steps done", "%s", strings.Join(names, ", "))
		}
	}
	if v.ResultBytes >= 0 {
		row("result", "%d bytes", v.ResultBytes)
	}
	switch {
	case v.Response != nil:
		r := v.Response
		note := ""
		switch {
		case r.OutcomeUnknown:
			note = " (outcome unknown: replayed to every retry until resolved)"
		case r.NotReplayable:
			note = " (not replayable: the body was not stored)"
		}
		fmt.Fprintf(w, "\nHTTP %d %s%s\n", r.Status, http.StatusText(r.Status), note)
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			for _, val := range r.Header[k] {
				fmt.Fprintf(w, "%s: %s\n", k, val)
			}
		}
		fmt.Fprintln(w)
		if r.Binary {
			body, _ := base64.StdEncoding.DecodeString(r.BodyBase64)
			fmt.Fprintf(w, "(binary body, %d bytes; first %d:)\n%s", len(body), min(len(body), 256), hex.Dump(body[:min(len(body), 256)]))
		} else {
			fmt.Fprintln(w, cut(r.Body))
		}
	case v.Result != "":
		fmt.Fprintf(w, "\n%s\n", cut(v.Result))
	case v.ResultHex != "":
		b, _ := hex.DecodeString(v.ResultHex)
		fmt.Fprintf(w, "\n(binary result; first %d bytes:)\n%s", len(b), hex.Dump(b))
	}
}

const maxText = 64 << 10

func cut(s string) string {
	if len(s) <= maxText {
		return s
	}
	return s[:maxText] + fmt.Sprintf("\n… (%d more bytes; --json shows all)", len(s)-maxText)
}

// age formats seconds as a short duration (1h02m, 3m04s, 5.2s).
func age(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return d.Round(100 * time.Millisecond).String()
}

// findByDigest returns the record under a full digest (64 hex digits), or
// under the only digest that begins with a shorter one (at least 16 hex
// digits: the form log lines carry).
func findByDigest(ctx context.Context, s idem.Store, digest string) (idem.Record, error) {
	digest = strings.ToLower(strings.TrimSpace(digest))
	if d, err := idem.ParseDigest(digest); err == nil {
		return idem.Lookup(ctx, s, d)
	}
	if len(digest) < 16 || len(digest) > 64 || strings.Trim(digest, "0123456789abcdef") != "" {
		return idem.Record{}, usageErr("--digest %q: want the record's digest, 64 hex digits, or its first 16 or more (as in log lines)", digest)
	}
	l, ok := s.(prefixFinder)
	if !ok {
		return idem.Record{}, fmt.Errorf("this store cannot look up a digest prefix: give the whole digest (64 hex digits)")
	}
	// Two are enough to tell "one" from "ambiguous": the store reads at
	// most two rows (an indexed range in SQL), however many records it
	// holds, so a lookup by prefix costs what a lookup by digest does.
	found, err := l.DigestsWithPrefix(ctx, digest, 2)
	if err != nil {
		return idem.Record{}, err
	}
	switch len(found) {
	case 0:
		return idem.Record{}, idem.ErrNotFound
	case 1:
		return idem.Lookup(ctx, s, found[0])
	}
	return idem.Record{}, fmt.Errorf("%w: more than one record begins with digest %s: give more of it", errAmbiguous, digest)
}

// prefixFinder is what a lookup by digest prefix needs from a store.
// memstore, sqlstore, redisstore and tiered stores have it.
type prefixFinder interface {
	// DigestsWithPrefix returns up to limit digests that begin with prefix.
	DigestsWithPrefix(ctx context.Context, prefix string, limit int) ([]idem.Digest, error)
}

// errAmbiguous: a digest prefix matches more than one record.
var errAmbiguous = errors.New("ambiguous digest")

var errNotHeldRecord = errors.New("the record is not held")

// errStepMismatch: a resolution names a step the key is not held in.
var errStepMismatch = errors.New("the key is not held in that step")
