package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
)

const keysHelp = `Records are stored under a hash of (scope, key), never the raw key: "keys
get" computes that hash from the key and the scope, "keys list" shows the
hashes (digests) with each record's state.
`

const keysGetHelp = `Shows the record of one key: its state, fence, lease, expiry and the
size of the stored result.

Arguments:
  KEY   the Idempotency-Key header value exactly as the client sent it:
        quoted ("order-17") or bare (order-17), which name the same key.

The record is found under the key's scope. For records written by
"idem proxy", pass the request headers the proxy derives the scope from
(Authorization unless the proxy runs with --scope-header):

  idem keys get --store sqlite:idem.db --header 'Authorization: Bearer t0k3n' '"order-17"'

For records written by a Go service, pass the scope the service derived
(its httpidem ScopeFunc, or the scope given to idem.NewKey) with --scope.
With neither, the key is looked up in the anonymous (empty) scope.
`

const keysListHelp = `Lists records, newest first, with their digest, state, Started mark,
fence, lease and expiry. Raw keys are never stored, so records are listed
by digest ('idem keys get' shows the digest of a key).

States:
  in_progress   a claim is being executed (or its holder died: "lease expired")
  completed     the result is stored and replayed to every retry
  released      given up without a result; the next request runs
  started       any state, with the Started mark: the work was about to have
                effects (the proxy in hold mode marks every request before
                forwarding it). in_progress + started + "lease expired": the
                holder died after forwarding; the next retry holds the key as
                outcome-unknown instead of forwarding again. A held key is a
                completed, started record whose stored answer is the
                outcome-unknown problem ('idem keys get --result' shows it).

Expired records that were not purged yet are listed with "expired".
SQL stores answer with one query (a scan of the table when --state is
given); Redis SCANs the whole database, as 'keys purge' does.
`

const keysPurgeHelp = `Deletes records that expired at least --before ago, --batch rows per
statement, until none is left; live records are never deleted. Redis
expires records by itself; there, purge only finds records whose TTL was
removed by hand.
`

// headerList is a repeatable "--header 'Name: value'" flag.
type headerList []string

func (l *headerList) String() string { return strings.Join(*l, ", ") }
func (l *headerList) Set(v string) error {
	name, _, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return errors.New(`want "Name: value"`)
	}
	*l = append(*l, v)
	return nil
}

// nameList is a repeatable header-name flag.
type nameList []string

func (l *nameList) String() string { return strings.Join(*l, ",") }
func (l *nameList) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("empty header name")
	}
	*l = append(*l, strings.TrimSpace(v))
	return nil
}

// requestScope computes the scope the proxy derives from a request that
// carries headers, with the proxy's --scope-header names: proxyScopeFunc,
// the proxy's own definition. A request with none of the scope headers is
// looked up in the anonymous keyspace, where a proxy with
// --anonymous-scope shared keeps it.
func requestScope(headers, scopeHeaders []string) (string, error) {
	r, err := http.NewRequest(http.MethodPost, "http://idem.invalid/", nil)
	if err != nil {
		return "", err
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		r.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	return proxyScopeFunc(scopeHeaders, true)(r)
}

func runKeysGet(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("keys get", stderr)
	dsn := fs.String("store", "", storeFlagUsage)
	scope := fs.String("scope", "", "the key's `SCOPE`, as a Go service derived it")
	var headers headerList
	var scopeHeaders nameList
	fs.Var(&headers, "header", "a request header, `'NAME: VALUE'`, as the client sent it to the proxy; repeatable")
	fs.Var(&scopeHeaders, "scope-header", "a header `NAME` the proxy forms the scope from (its --scope-header); repeatable (default Authorization)")
	showResult := fs.Bool("result", false, "print the stored result bytes after the record (for proxy records: httpidem's encoding of the response)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("want exactly one KEY argument, got %d", fs.NArg())
	}
	scopeSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "scope" {
			scopeSet = true
		}
	})
	if scopeSet && (len(headers) > 0 || len(scopeHeaders) > 0) {
		return usageErr("--scope and --header/--scope-header are exclusive: the scope is given, or computed from the headers")
	}
	id, err := httpidem.ParseKey(fs.Arg(0))
	if err != nil {
		return err
	}
	if !scopeSet && (len(headers) > 0 || len(scopeHeaders) > 0) {
		if *scope, err = requestScope(headers, scopeHeaders); err != nil {
			return fmt.Errorf("scope from --header: %w", err)
		}
	}
	key, err := idem.NewKey(*scope, id)
	if err != nil {
		return err
	}
	h, err := openExistingStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	rec, err := h.Store.Get(ctx, key)
	if errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("no record for key %q in %s (digest %s)", key.ID(), describeScope(key.Scope(), scopeSet, len(headers) > 0), key.Digest())
	}
	if err != nil {
		return h.Wrap(err)
	}
	printRecord(stdout, rec)
	if *showResult {
		_, _ = stdout.Write(rec.Result)
	}
	return nil
}

func describeScope(scope string, given, fromHeaders bool) string {
	switch {
	case fromHeaders && scope == "":
		return "the anonymous scope (none of the scope headers was given)"
	case fromHeaders:
		return "the scope of those headers"
	case scope == "":
		return "the anonymous scope"
	}
	return fmt.Sprintf("scope %q", scope)
}

func printRecord(w io.Writer, r idem.Record) {
	fmt.Fprintf(w, "digest:      %s\n", r.Digest)
	fmt.Fprintf(w, "state:       %s\n", r.State)
	fmt.Fprintf(w, "fence:       %d\n", r.Fence)
	fmt.Fprintf(w, "fingerprint: %s\n", r.Fingerprint)
	fmt.Fprintf(w, "created:     %s\n", timestamp(r.CreatedAt))
	if r.State == idem.StateInProgress {
		fmt.Fprintf(w, "lease until: %s\n", timestamp(r.LeaseUntil))
	}
	fmt.Fprintf(w, "started:     %t\n", r.Started)
	fmt.Fprintf(w, "expires:     %s\n", timestamp(r.ExpiresAt))
	fmt.Fprintf(w, "result:      %d bytes\n", len(r.Result))
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// lister is what 'idem keys list' needs from a store. memstore, sqlstore
// and redisstore implement it (their list.go).
type lister interface {
	// List returns up to limit records, newest first: those in state (any
	// state when state is 0) and, when startedOnly is set, only those with
	// the Started mark. Results are not returned.
	List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error)
}

func runKeysList(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("keys list", stderr)
	dsn := fs.String("store", "", storeFlagUsage)
	stateName := fs.String("state", "", "only records in `STATE`: in_progress, completed, released, or started (the Started mark, any state)")
	limit := fs.Int("limit", 100, "at most `N` records")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	var state idem.State
	startedOnly := false
	switch *stateName {
	case "":
	case "started":
		startedOnly = true
	default:
		st, ok := idem.ParseState(*stateName)
		if !ok {
			return usageErr("--state %q: want in_progress, completed, released or started", *stateName)
		}
		state = st
	}
	if *limit <= 0 {
		return usageErr("--limit must be positive")
	}
	h, err := openExistingStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	l, ok := h.Store.(lister)
	if !ok {
		return fmt.Errorf("store %s cannot list its records", h.DSN)
	}
	recs, err := l.List(ctx, state, startedOnly, *limit)
	if err != nil {
		return h.Wrap(err)
	}
	printRecords(stdout, recs, time.Now())
	return nil
}

// printRecords prints one line per record. now (the local clock) only
// annotates expired leases and records; the store judged by its own clock.
func printRecords(w io.Writer, recs []idem.Record, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DIGEST\tSTATE\tSTARTED\tFENCE\tCREATED\tLEASE UNTIL\tEXPIRES")
	for _, r := range recs {
		state := r.State.String()
		switch {
		case !r.ExpiresAt.After(now):
			state += " (expired)"
		case r.State == idem.StateInProgress && !r.LeaseUntil.After(now):
			state += " (lease expired)"
		}
		lease := "-"
		if r.State == idem.StateInProgress {
			lease = timestamp(r.LeaseUntil)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Digest, state, started(r), r.Fence, timestamp(r.CreatedAt), lease, timestamp(r.ExpiresAt))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d records\n", len(recs))
}

// started shows a record's Started mark.
func started(r idem.Record) string {
	if r.Started {
		return "yes"
	}
	return "-"
}

func runKeysPurge(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("keys purge", stderr)
	dsn := fs.String("store", "", storeFlagUsage)
	before := fs.Duration("before", 0, "only records that expired at least `DURATION` ago")
	batch := fs.Int("batch", 1000, "`N` rows deleted per statement")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *before < 0 {
		return usageErr("--before must not be negative")
	}
	if *batch <= 0 {
		return usageErr("--batch must be positive")
	}
	h, err := openExistingStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	n, err := h.Store.Purge(ctx, *before, *batch)
	if err != nil {
		return h.Wrap(err)
	}
	fmt.Fprintf(stdout, "purged %d expired records\n", n)
	return nil
}
