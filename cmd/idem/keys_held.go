package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/httpidem"
)

const keysResolveHelp = `Resolves a held key: one whose request may have had its effects but
whose result is unknown (the proxy's process died after forwarding it, or
the service's answer was lost). Until it is resolved, every retry with the
key gets the outcome-unknown answer replayed. Find held keys with
'idem keys list --state held'; look at one with 'idem keys get --digest D'.

Decide from the service's own records whether the operation happened, then
either store the answer the service gives for it, which every retry then
gets (replayed, with Idempotent-Replayed: true):

  idem keys resolve --store DSN --digest 3f2a9c41d07e5b18 \
      --status 201 --header 'Content-Type: application/json' --body @order.json

or release the key, so that the next retry runs the request (only when the
operation did not happen):

  idem keys resolve --store DSN --digest 3f2a9c41d07e5b18 --release

The record is found by digest (all 64 hex digits, or the first 16 as log
lines print them), or by KEY with the same scope flags as 'keys get'
(--scope, --request-header, --scope-header). For a key held by idem.Do (Go
code, not HTTP), --body is the JSON of the value to return and --status
and --header are refused.

A key held in a step of an operation of steps (package step: a HoldUnknown
step that started and never finished) names the step in its record: the
STEP column of 'idem keys list --state held', "held step" in 'keys get'.
Look that step's call up in the other service. --step NAME resolves only
a key held in that step: a key held elsewhere (or in no step) is refused.
For step.Do, --body is the JSON of the operation's result; --release lets
the next retry run the step again.

The store replaces the record only if it is still the held record that
was read (the same fence), in one atomic step; a record that changed in
between is left alone and the command fails. It prints the record it
replaced. Sending the same resolution again after a lost answer succeeds.
`

// keyFlags names a record: KEY with its scope, or --digest.
type keyFlags struct {
	scope        string
	headers      headerList
	scopeHeaders nameList
	digest       string
	headerFlag   string
}

func (k *keyFlags) register(fs *flag.FlagSet, headerFlag string) {
	k.headerFlag = headerFlag
	fs.StringVar(&k.scope, "scope", "", "the key's `SCOPE`, as a Go service derived it")
	fs.Var(&k.headers, headerFlag, "a request header, `'NAME: VALUE'`, as the client sent it to the proxy; repeatable")
	fs.Var(&k.scopeHeaders, "scope-header", "a header `NAME` the proxy forms the scope from (its --scope-header); repeatable (default Authorization)")
	fs.StringVar(&k.digest, "digest", "", "find the record by its `DIGEST` (as 'keys list' and log lines print it) instead of KEY")
}

// find opens the store and reads the record the flags name.
func (k *keyFlags) find(ctx context.Context, fs *flag.FlagSet, dsn string) (h *storeurl.Handle, rec idem.Record, err error) {
	scopeSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "scope" {
			scopeSet = true
		}
	})
	var key idem.Key
	switch {
	case k.digest != "":
		if fs.NArg() != 0 || scopeSet || len(k.headers) > 0 || len(k.scopeHeaders) > 0 {
			return nil, rec, usageErr("--digest names the record alone: no KEY, --scope, --%s or --scope-header", k.headerFlag)
		}
	case fs.NArg() != 1:
		return nil, rec, usageErr("want exactly one KEY argument (or --digest), got %d", fs.NArg())
	default:
		if scopeSet && (len(k.headers) > 0 || len(k.scopeHeaders) > 0) {
			return nil, rec, usageErr("--scope and --%s/--scope-header are exclusive: the scope is given, or computed from the headers", k.headerFlag)
		}
		id, err := httpidem.ParseKey(fs.Arg(0))
		if err != nil {
			return nil, rec, err
		}
		scope := k.scope
		if !scopeSet && (len(k.headers) > 0 || len(k.scopeHeaders) > 0) {
			if scope, err = requestScope(k.headers, k.scopeHeaders); err != nil {
				return nil, rec, fmt.Errorf("scope from --%s: %w", k.headerFlag, err)
			}
		}
		if key, err = idem.NewKey(scope, id); err != nil {
			return nil, rec, err
		}
	}
	h, err = openExistingStore(ctx, dsn)
	if err != nil {
		return nil, rec, err
	}
	if k.digest != "" {
		rec, err = findByDigest(ctx, h.Store, k.digest)
		if errors.Is(err, idem.ErrNotFound) {
			err = fmt.Errorf("no record with digest %s", k.digest)
		}
	} else {
		rec, err = h.Store.Get(ctx, key)
		if errors.Is(err, idem.ErrNotFound) {
			err = fmt.Errorf("no record for key %q in %s (digest %s)", key.ID(), describeScope(key.Scope(), scopeSet, len(k.headers) > 0), key.Digest())
		}
	}
	if err != nil {
		if !errors.Is(err, errUsage) {
			err = h.Wrap(err)
		}
		_ = h.Close()
		return nil, rec, err
	}
	return h, rec, nil
}

// heldDetails describes recs; held ones are read whole (a Lookup each),
// for their age, request and scope digest.
func heldDetails(ctx context.Context, s idem.Store, recs []idem.Record, now time.Time) []recordView {
	out := make([]recordView, 0, len(recs))
	for _, r := range recs {
		if r.State == idem.StateHeld {
			if full, err := idem.Lookup(ctx, s, r.Digest); err == nil {
				out = append(out, newRecordView(full, true, now))
				continue
			}
		}
		out = append(out, newRecordView(r, false, now))
	}
	return out
}

// printHeld prints held records, newest first, one a line.
func printHeld(w io.Writer, views []recordView) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DIGEST\tAGE\tSCOPE\tREQUEST\tSTEP\tFENCE\tANSWER")
	for _, v := range views {
		scope, req := dash(v.ScopeDigest), dash(v.Request)
		answer := "-"
		switch {
		case v.Response != nil:
			answer = strconv.Itoa(v.Response.Status)
		case v.Kind == "do":
			answer = "idem.Do"
		}
		step := "-"
		if v.Step != "" {
			step = printable(v.Step)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", v.Digest, age(v.AgeSeconds), scope, req, step, v.Fence, answer)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d held keys\n", len(views))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// resolution builds the result that resolves held record rec: an HTTP
// response for a record written by the proxy or httpidem, the body alone
// for one held by idem.Do. step, when not empty, is the step the operator
// resolves: the record must be held in that step.
func resolution(rec idem.Record, step string, release bool, status int, header http.Header, body []byte, bodySet bool) (idem.Resolution, error) {
	r := idem.Resolution{Digest: rec.Digest, Fence: rec.Fence, Release: release}
	if rec.State != idem.StateHeld {
		return r, fmt.Errorf("%w: it is %s (fence %d); only held keys are resolved", errNotHeldRecord, rec.State, rec.Fence)
	}
	if step != "" {
		if held := newRecordView(rec, true, time.Time{}).Step; held != step {
			if held == "" {
				return r, fmt.Errorf("%w: step %s given, but the key is not held in a step", errStepMismatch, printable(step))
			}
			return r, fmt.Errorf("%w: step %s given, but the key is held in step %s", errStepMismatch, printable(step), printable(held))
		}
	}
	if release {
		if status != 0 || len(header) > 0 || bodySet {
			return r, usageErr("--release stores nothing: no --status, --header or --body")
		}
		return r, nil
	}
	if _, err := httpidem.DecodeResponse(rec.Result); err != nil {
		// Held by idem.Do: its results are JSON values.
		if status != 0 || len(header) > 0 {
			return r, usageErr("this key is held by idem.Do, not HTTP: give the JSON of its value with --body, without --status or --header")
		}
		if !bodySet || !json.Valid(body) {
			return r, usageErr("this key is held by idem.Do: --body must be the JSON of its value")
		}
		r.Result = body
		return r, nil
	}
	if status == 0 {
		return r, usageErr("want --status (the service's answer for the key) or --release")
	}
	b, err := httpidem.EncodeResponse(status, header, body)
	if err != nil {
		return r, usageErr("%v", err)
	}
	r.Result = b
	return r, nil
}

func runKeysResolve(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("keys resolve", stderr)
	dsn := fs.String("store", "", storeFlagUsage)
	var kf keyFlags
	kf.register(fs, "request-header")
	release := fs.Bool("release", false, "release the key: the next retry runs the request (only if it did not happen)")
	step := fs.String("step", "", "resolve only if the key is held in step `NAME` (as 'keys list --state held' shows it)")
	status := fs.Int("status", 0, "the `STATUS` of the response to store")
	var respHeaders headerList
	fs.Var(&respHeaders, "header", "a header of the response to store, `'NAME: VALUE'`; repeatable")
	bodyArg := fs.String("body", "", "the response body: `TEXT`, or @FILE to read it from a file (@- for standard input)")
	asJSON := fs.Bool("json", false, "print the replaced record and the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bodySet := false
	fs.Visit(func(f *flag.Flag) { bodySet = bodySet || f.Name == "body" })
	var body []byte
	if bodySet {
		if body, err = readBody(*bodyArg); err != nil {
			return err
		}
	}
	header := http.Header{}
	for _, h := range respHeaders {
		name, value, _ := strings.Cut(h, ":")
		header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if !*release && *status == 0 && !bodySet {
		return usageErr("want --status/--header/--body (the result to store) or --release")
	}
	h, rec, err := kf.find(ctx, fs, *dsn)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	r, err := resolution(rec, *step, *release, *status, header, body, bodySet)
	if err != nil {
		return err
	}
	if err := idem.Resolve(ctx, h.Store, r); err != nil {
		if errors.Is(err, idem.ErrNotHeld) {
			return fmt.Errorf("record %s changed since it was read (fence %d): nothing was replaced; look at it again", rec.Digest, rec.Fence)
		}
		return h.Wrap(err)
	}
	now := time.Now()
	replaced := newRecordView(rec, true, now)
	if *asJSON {
		out := struct {
			Replaced recordView  `json:"replaced"`
			Released bool        `json:"released"`
			Result   *recordView `json:"result,omitempty"`
		}{Replaced: replaced, Released: r.Release}
		if after, err := idem.Lookup(ctx, h.Store, rec.Digest); err == nil {
			v := newRecordView(after, true, now)
			out.Result = &v
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintln(stdout, "replaced:")
	printRecordView(stdout, replaced)
	if r.Release {
		fmt.Fprintf(stdout, "\nreleased %s: the next retry with the key runs the request\n", rec.Digest)
	} else {
		fmt.Fprintf(stdout, "\nresolved %s: every retry with the key now gets this result (%d bytes)\n", rec.Digest, len(r.Result))
	}
	return nil
}

func readBody(arg string) ([]byte, error) {
	name, ok := strings.CutPrefix(arg, "@")
	switch {
	case !ok:
		return []byte(arg), nil
	case name == "-":
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(name)
}
