package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/apicheck"
)

const checkUsage = `Usage: idem check URL [flags]

Checks whether the Idempotency-Key handling of any HTTP API is right: replay
fidelity, mismatches, concurrent duplicates, in-flight duplicates, scopes,
failures and key syntax.

Requests go to URL's origin only, to the method and paths given by the flags
(--path, --slow-path, --fail-path, --mismatch-path, --mismatch-method, the
oracle's count path), never following a redirect, within --max-requests and
--rate. A check that needs a flag you did not give is SKIPped and names it.

Each verdict says what was observed. A PASS needs evidence: without an
effect oracle (--oracle), and with answers that do not differ from one
execution to the next, a check that cannot tell a replay from a second
execution is a WARN that says so. A request that times out (--timeout) is a
FAIL of the check that sent it, with where the time went.

The exit status is 1 when a check fails (with --strict, also on any WARN or
SKIP), 2 on bad usage.

Example:
  idem check http://127.0.0.1:8080 --path /charges --body '{"amount":100,"ref":"{{unique}}"}' \
    --header 'Authorization: Bearer A' --other-header 'Authorization: Bearer B' \
    --slow-path '/charges?sleep=2s' --fail-path '/charges?fail=1' --mismatch-query a=1 \
    --oracle 'count:/stats#/charges' --strict --skip expiry

Flags:
`

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), checkUsage)
		fs.PrintDefaults()
	}
	var cfg apicheck.Config
	var headers, other stringList
	configFile := fs.String("config", "", "read the settings from a JSON `file` (flags given as well win)")
	fs.StringVar(&cfg.Method, "method", "POST", "the endpoint's `method`")
	fs.StringVar(&cfg.Path, "path", "/", "the endpoint's `path` on URL")
	fs.StringVar(&cfg.Body, "body", "", "request body `template`; "+apicheck.Placeholder+" becomes a unique value (default a small JSON body)")
	fs.StringVar(&cfg.ContentType, "content-type", "application/json", "the body's media `type`")
	fs.Var(&headers, "header", "`Name: value` sent on every request, e.g. the caller's credentials (repeatable)")
	fs.Var(&other, "other-header", "a second caller's `Name: value`, for the scope checks (repeatable)")
	fs.StringVar(&cfg.KeyHeader, "key-header", "Idempotency-Key", "the key header's `name`")
	fs.BoolVar(&cfg.RequireKey, "require-key", false, "the API refuses requests without a key")
	fs.StringVar(&cfg.SlowPath, "slow-path", "", "`path` of a slow variant (≥ 1s), for the in-flight check")
	fs.StringVar(&cfg.FailPath, "fail-path", "", "`path` of a variant that answers 5xx, for the failure check")
	fs.StringVar(&cfg.MismatchQuery, "mismatch-query", "", "a `query` string the endpoint takes (a=1), sent under a used key by mismatch-query")
	fs.StringVar(&cfg.MismatchPath, "mismatch-path", "", "another `path` that takes the same request, sent under a used key by mismatch-path")
	fs.StringVar(&cfg.MismatchMethod, "mismatch-method", "", "another `method` the endpoint takes, sent under a used key by mismatch-method")
	var only, skip stringList
	fs.Var(&only, "only", "run only these `checks` (comma-separated ids, repeatable; see the report's ids)")
	fs.Var(&skip, "skip", "do not run these `checks` (comma-separated ids, repeatable)")
	strict := fs.Bool("strict", false, "exit 1 on any WARN or SKIP too, not only on a FAIL (for CI)")
	fs.BoolVar(&cfg.StoresFailures, "stores-failures", false, "the API stores and replays 5xx answers (Stripe's way)")
	fs.StringVar(&cfg.Oracle, "oracle", "", "how to count effects: id:POINTER, count:PATH[#POINTER] or cmd:COMMAND (default: compare bodies)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 8, "simultaneous first requests in the concurrency check")
	fs.StringVar(&cfg.Retention, "retention", "", "the retention the API documents, e.g. 24h")
	maxWait := fs.Duration("max-wait", 30*time.Second, "wait out a declared retention up to this long")
	fs.IntVar(&cfg.MaxRequests, "max-requests", 200, "send at most this many requests")
	fs.Float64Var(&cfg.Rate, "rate", 50, "send at most this many requests per second, on average: the concurrency check's burst of --concurrency requests goes out at once and is charged in full, so the next request waits --concurrency/--rate seconds; oracle count requests count too")
	timeout := fs.Duration("timeout", 10*time.Second, "bound each request")
	asJSON := fs.Bool("json", false, "write the report as JSON on stdout (progress goes to stderr)")
	report := fs.String("report", "", "also write a self-contained HTML report to `file`")

	var url string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		url, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 1 || (fs.NArg() == 1 && url != ""):
		return usageErr("unexpected argument %q", fs.Arg(fs.NArg()-1))
	case fs.NArg() == 1:
		url = fs.Arg(0)
	}
	cfg.URL, cfg.Headers, cfg.OtherHeaders = url, headers, other
	cfg.Only, cfg.Skip = only, skip
	cfg.MaxWait, cfg.Timeout = apicheck.Duration(*maxWait), apicheck.Duration(*timeout)

	if *configFile != "" {
		file, err := apicheck.LoadFile(*configFile)
		if err != nil {
			return usageErr("--config: %v", err)
		}
		cfg = mergeCheckConfig(*file, cfg, fs)
	}
	if cfg.URL == "" {
		return usageErr("give the API's base URL: idem check URL")
	}

	out := stdout
	if *asJSON {
		out = stderr
	}
	fmt.Fprintf(out, "idem check %s %s\n", cfg.Method, cfg.Path)
	rep, err := apicheck.Run(ctx, cfg, func(r apicheck.Result) { apicheck.WriteLine(out, r) })
	if rep == nil {
		return usageErr("%v", err)
	}
	apicheck.WriteSummary(out, rep)
	if *asJSON {
		if werr := apicheck.WriteJSON(stdout, rep); werr != nil {
			return werr
		}
	}
	if *report != "" {
		if werr := writeCheckReport(*report, rep); werr != nil {
			return werr
		}
		fmt.Fprintf(out, "report written to %s\n", *report)
	}
	switch {
	case errors.Is(err, apicheck.ErrEndpoint):
		return err
	case err != nil:
		return err
	case rep.Failed():
		return fmt.Errorf("%d of %s failed", rep.Counts[apicheck.Fail], apicheck.Plural(len(rep.Results), "check"))
	case *strict && !rep.Clean():
		return fmt.Errorf("--strict: %d of %s did not pass (%d warn, %d skipped)", rep.Counts[apicheck.Warn]+rep.Counts[apicheck.Skip],
			apicheck.Plural(len(rep.Results), "check"), rep.Counts[apicheck.Warn], rep.Counts[apicheck.Skip])
	}
	return nil
}

// mergeCheckConfig starts from the file and lets every flag given on the
// command line win.
func mergeCheckConfig(file, flags apicheck.Config, fs *flag.FlagSet) apicheck.Config {
	out := file
	if flags.URL != "" {
		out.URL = flags.URL
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "method":
			out.Method = flags.Method
		case "path":
			out.Path = flags.Path
		case "body":
			out.Body = flags.Body
		case "content-type":
			out.ContentType = flags.ContentType
		case "header":
			out.Headers = flags.Headers
		case "other-header":
			out.OtherHeaders = flags.OtherHeaders
		case "key-header":
			out.KeyHeader = flags.KeyHeader
		case "require-key":
			out.RequireKey = flags.RequireKey
		case "slow-path":
			out.SlowPath = flags.SlowPath
		case "fail-path":
			out.FailPath = flags.FailPath
		case "mismatch-query":
			out.MismatchQuery = flags.MismatchQuery
		case "mismatch-path":
			out.MismatchPath = flags.MismatchPath
		case "mismatch-method":
			out.MismatchMethod = flags.MismatchMethod
		case "only":
			out.Only = flags.Only
		case "skip":
			out.Skip = flags.Skip
		case "stores-failures":
			out.StoresFailures = flags.StoresFailures
		case "oracle":
			out.Oracle = flags.Oracle
		case "concurrency":
			out.Concurrency = flags.Concurrency
		case "retention":
			out.Retention = flags.Retention
		case "max-wait":
			out.MaxWait = flags.MaxWait
		case "max-requests":
			out.MaxRequests = flags.MaxRequests
		case "rate":
			out.Rate = flags.Rate
		case "timeout":
			out.Timeout = flags.Timeout
		}
	})
	return out
}

func writeCheckReport(path string, rep *apicheck.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := apicheck.WriteHTML(f, rep); err != nil {
		f.Close()
		return fmt.Errorf("--report: %w", err)
	}
	return f.Close()
}
