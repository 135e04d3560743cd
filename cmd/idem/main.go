package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/storeurl"
)

const usage = `idem makes "do it again" harmless.

Usage:
  idem proxy   --upstream URL [--listen ADDR] [--store DSN] [--cache DSN] [flags]
  idem migrate --store DSN
  idem keys get   --store DSN [--scope SCOPE] KEY
  idem keys purge --store DSN [--before DURATION] [--batch N]

Store DSNs:
  memory:  sqlite:PATH  postgres://user:pass@host:port/db
  mysql://user:pass@host:port/db  redis://host:port/db

Run "idem COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status: 0 success,
// 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "proxy":
		err = runProxy(ctx, args[1:], stdout, stderr)
	case "migrate":
		err = runMigrate(ctx, args[1:], stdout, stderr)
	case "keys":
		err = runKeys(ctx, args[1:], stdout, stderr)
	case "demo":
		err = runDemo(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "idem: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "idem %s: %v\n", args[0], err)
		return 2
	}
	fmt.Fprintf(stderr, "idem %s: %v\n", args[0], err)
	return 1
}

var errUsage = errors.New("usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, turning flag errors into usage errors (the flag
// package has printed the details already).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v", err)
	}
	return nil
}

// openStore parses and opens a DSN, and prepares it (schema, server checks).
func openStore(ctx context.Context, dsn string) (*storeurl.Handle, error) {
	if dsn == "" {
		return nil, usageErr("--store is required")
	}
	d, err := storeurl.Parse(dsn)
	if err != nil {
		return nil, err
	}
	h, err := storeurl.Open(d)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h.Prepare(pctx); err != nil {
		h.Close()
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return h, nil
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", stderr)
	dsn := fs.String("store", "", "store DSN (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	h, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer h.Close()
	fmt.Fprintf(stdout, "store %s is ready\n", h.DSN)
	return nil
}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("keys needs a subcommand: get or purge")
	}
	switch args[0] {
	case "get":
		return runKeysGet(ctx, args[1:], stdout, stderr)
	case "purge":
		return runKeysPurge(ctx, args[1:], stdout, stderr)
	}
	return usageErr("unknown keys subcommand %q (want get or purge)", args[0])
}

func runKeysGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keys get", stderr)
	dsn := fs.String("store", "", "store DSN (required)")
	scope := fs.String("scope", "", "the key's scope (as the service derived it)")
	showResult := fs.Bool("result", false, "print the stored result bytes after the record")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("want exactly one KEY argument, got %d", fs.NArg())
	}
	key, err := idem.NewKey(*scope, fs.Arg(0))
	if err != nil {
		return err
	}
	h, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer h.Close()
	rec, err := h.Store.Get(ctx, key)
	if errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("no record for key %q in scope %q (digest %s)", key.ID(), key.Scope(), key.Digest())
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

func printRecord(w io.Writer, r idem.Record) {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(w, "digest:      %s\n", r.Digest)
	fmt.Fprintf(w, "state:       %s\n", r.State)
	fmt.Fprintf(w, "fence:       %d\n", r.Fence)
	fmt.Fprintf(w, "fingerprint: %s\n", r.Fingerprint)
	fmt.Fprintf(w, "created:     %s\n", ts(r.CreatedAt))
	if r.State == idem.StateInProgress {
		fmt.Fprintf(w, "lease until: %s\n", ts(r.LeaseUntil))
	}
	fmt.Fprintf(w, "expires:     %s\n", ts(r.ExpiresAt))
	fmt.Fprintf(w, "result:      %d bytes\n", len(r.Result))
}

func runKeysPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keys purge", stderr)
	dsn := fs.String("store", "", "store DSN (required)")
	before := fs.Duration("before", 0, "only records that expired at least this long ago")
	batch := fs.Int("batch", 1000, "rows deleted per statement")
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
	h, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer h.Close()
	n, err := h.Store.Purge(ctx, *before, *batch)
	if err != nil {
		return h.Wrap(err)
	}
	fmt.Fprintf(stdout, "purged %d expired records\n", n)
	return nil
}
