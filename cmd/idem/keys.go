package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
)

const keysHelp = `Records are stored under a hash of (scope, key), never the raw key: "keys
get" computes that hash from the key and the scope, "keys list" shows the
hashes (digests) with each record's state.
`

const keysGetHelp = `Shows the record of one key: its state, fence, lease, expiry and its
stored result, decoded when it is an HTTP response (status, headers, and
the body as text, or a hex dump of its first bytes when it is binary).
--json prints the same as JSON (a binary body whole, in base64).

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

Without the key, name the record by its digest: all 64 hex digits, as
'keys list' prints them, or the first 16, as log lines do (key=…):

  idem keys get --store sqlite:idem.db --digest 3f2a9c41d07e5b18
`

const keysListHelp = `Lists records, newest first, with their digest, state, Started mark,
fence, lease and expiry. Raw keys are never stored, so records are listed
by digest ('idem keys get --digest' shows one). --json prints them as a
JSON array.

The first line is the store's replication ("replication: synchronous (…)",
on stderr with --json): whether its records survive a failover of the
database (docs/replication.md).

States:
  in_progress   a claim is being executed (or its holder died: "lease expired")
  held          the outcome is unknown: the request may have had its effects
                (the proxy died after forwarding it, or the service's answer
                was lost), and every retry gets the outcome-unknown answer
                until an operator, or the service through the proxy's
                --resolve-url, resolves it ('idem keys resolve'). Listed with
                their age, scope digest, request (method and path) and STEP:
                for a key held in a step of an operation of steps (package
                step), the step whose call may have gone out ("-": none;
                quoted when the name is not plain text). --json adds "step"
                and "steps_finished" (the steps that finished before it).
  completed     the result is stored and replayed to every retry
  released      given up without a result; the next request runs
  started       any state, with the Started mark: the work was about to have
                effects (the proxy in hold mode marks every request before
                forwarding it). in_progress + started + "lease expired": the
                holder died after forwarding; the next retry holds the key
                instead of forwarding again.

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
	var kf keyFlags
	kf.register(fs, "header")
	showResult := fs.Bool("result", false, "print the stored result bytes after the record (for proxy records: httpidem's encoding of the response)")
	asJSON := fs.Bool("json", false, "print the record as JSON (the response decoded, a binary body in base64)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	h, rec, err := kf.find(ctx, fs, *dsn)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(newRecordView(rec, true, time.Now()))
	}
	printRecordView(stdout, newRecordView(rec, true, time.Now()))
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
	stateName := fs.String("state", "", "only records in `STATE`: in_progress, held, completed, released, or started (the Started mark, any state)")
	limit := fs.Int("limit", 100, "at most `N` records")
	asJSON := fs.Bool("json", false, "print the records as JSON, one array")
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
			return usageErr("--state %q: want in_progress, held, completed, released or started", *stateName)
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
	views := heldDetails(ctx, h.Store, recs, time.Now())
	// The store's replication says whether its records survive a
	// failover (docs/replication.md): on stdout before the table, on
	// stderr with --json so that stdout stays one JSON array.
	if line := replicationLine(ctx, h); line != "" {
		if *asJSON {
			fmt.Fprintln(stderr, line)
		} else {
			fmt.Fprintln(stdout, line)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(views)
	}
	if state == idem.StateHeld {
		printHeld(stdout, views)
		return nil
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

// replicationLine is "replication: MODE (DETAIL)" for a store that can read
// its server's replication, "" for one that cannot.
func replicationLine(ctx context.Context, h *storeurl.Handle) string {
	rep, ok, err := h.Replication(ctx)
	switch {
	case !ok:
		return ""
	case err != nil:
		return "replication: not read: " + err.Error()
	}
	return "replication: " + rep.String()
}
