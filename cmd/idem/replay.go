package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/idem/internal/apicheck"
)

const replayHelp = `Sends recorded traffic again to a staging service as a duplicate storm, and
counts the effects of each recorded operation: the source document's third
test, "replay recorded traffic, and prove zero duplicate effects".

FILE is an NDJSON recording, written by 'idem proxy --record FILE' (or any
file of the same lines: a webhook receiver's recorded callbacks replay the
same way). Each record is sent --copies times, all of them shuffled,
--concurrency at a time, each after a random wait up to --delay. The keys
get a suffix unique to the run (--same-keys sends them as recorded), so a
second replay is not answered from the first one's records.

Credentials: a recording holds placeholders such as {{authorization-1}}
instead of credentials. --credentials names a JSON file mapping each one to
the header value to send, e.g. {"{{authorization-1}}": "Bearer staging-a"}.

Effects are counted by the oracles of idem check: --oracle id:POINTER (the
distinct resource ids among an operation's 2xx answers; without an oracle,
the distinct 2xx bodies), or count:PATH#POINTER / cmd:COMMAND (operations are
then sent one after another, each with a count before and after). An
operation with more than one effect is a finding, listed with its requests.
Answers are counted as replayed (2xx marked Idempotent-Replayed), executed
(other 2xx), refused (4xx) and failed (5xx or none).

The rules of idem check apply: requests go to --target's origin only, never
following a redirect, within --max-requests (a replay that needs more is
refused before it starts) and --rate. The exit status is 1 when an
operation had more than one effect.
`

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", stderr)
	var cfg apicheck.ReplayConfig
	fs.StringVar(&cfg.Target, "target", "", "base `URL` of the service to replay against (required)")
	fs.IntVar(&cfg.Copies, "copies", 2, "send each recorded request this many times")
	fs.IntVar(&cfg.Concurrency, "concurrency", 8, "requests in flight at once")
	fs.DurationVar(&cfg.Delay, "delay", 0, "each request waits a random time up to this `duration` first: late duplicates")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the shuffle and the delays, to repeat a run (0: random)")
	creds := fs.String("credentials", "", "JSON `file` mapping each placeholder of the recording to a header value")
	fs.BoolVar(&cfg.SameKeys, "same-keys", false, "send the recorded keys as they are (default: a suffix unique to the run)")
	fs.StringVar(&cfg.KeyHeader, "key-header", "Idempotency-Key", "the key header's `name`")
	fs.StringVar(&cfg.Oracle, "oracle", "", "how to count effects: id:POINTER, count:PATH[#POINTER] or cmd:COMMAND (default: distinct 2xx bodies)")
	fs.IntVar(&cfg.MaxRequests, "max-requests", 1000, "send at most this many requests, oracle reads included")
	fs.Float64Var(&cfg.Rate, "rate", 100, "send at most this many requests per second")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "bound each request")
	asJSON := fs.Bool("json", false, "write the report as JSON on stdout (progress goes to stderr)")
	report := fs.String("report", "", "also write a self-contained HTML report to `file`")

	var files []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		files, args = append(files, args[0]), args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	files = append(files, fs.Args()...)
	if len(files) == 0 {
		return usageErr("give a recording: idem replay FILE --target URL")
	}
	if cfg.Target == "" {
		return usageErr("--target is required")
	}
	// The request budget first, from a count that keeps no record in
	// memory: a recording too large for --max-requests is refused before
	// it is read (records × copies; oracle reads are counted later).
	if cfg.Copies >= 1 && cfg.Copies <= 100 && cfg.MaxRequests > 0 {
		total := 0
		for _, name := range files {
			f, err := os.Open(name)
			if err != nil {
				return usageErr("%v", err)
			}
			n, err := apicheck.CountRecords(name, f)
			f.Close()
			if err != nil {
				return usageErr("%v", err)
			}
			total += n
		}
		if need := total * cfg.Copies; need > cfg.MaxRequests {
			return usageErr("the replay needs %d requests (%d records × %d copies): more than --max-requests %d", need, total, cfg.Copies, cfg.MaxRequests)
		}
	}
	var records []apicheck.Record
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return usageErr("%v", err)
		}
		recs, err := apicheck.ReadRecords(name, f)
		f.Close()
		if err != nil {
			return usageErr("%v", err)
		}
		records = append(records, recs...)
	}
	if *creds != "" {
		b, err := os.ReadFile(*creds)
		if err != nil {
			return usageErr("--credentials: %v", err)
		}
		if err := json.Unmarshal(b, &cfg.Credentials); err != nil {
			return usageErr("--credentials %s: want a JSON object of placeholder → header value: %v", *creds, err)
		}
	}

	out := stdout
	if *asJSON {
		out = stderr
	}
	fmt.Fprintf(out, "idem replay: %s × %d copies to %s\n", apicheck.Plural(len(records), "record"), cfg.Copies, cfg.Target)
	rep, err := apicheck.Replay(ctx, cfg, records, func(p apicheck.Progress) { apicheck.WriteReplayProgress(out, p) })
	if rep == nil {
		return usageErr("%v", err)
	}
	apicheck.WriteReplayText(out, rep)
	if *asJSON {
		if werr := apicheck.WriteReplayJSON(stdout, rep); werr != nil {
			return werr
		}
	}
	if *report != "" {
		f, ferr := os.Create(*report)
		if ferr != nil {
			return fmt.Errorf("--report: %w", ferr)
		}
		if werr := apicheck.WriteReplayHTML(f, rep); werr != nil {
			f.Close()
			return fmt.Errorf("--report: %w", werr)
		}
		if cerr := f.Close(); cerr != nil {
			return fmt.Errorf("--report: %w", cerr)
		}
		fmt.Fprintf(out, "report written to %s\n", *report)
	}
	switch {
	case err != nil:
		return err
	case rep.Failed():
		return fmt.Errorf("%d of %s had more than one effect", rep.Duplicates, apicheck.Plural(len(rep.Operations), "operation"))
	}
	return nil
}
