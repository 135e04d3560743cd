package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/demo/shop"
)

const demoUsage = `Usage: idem demo [--orders N] [--compare] [--report FILE.html] [backends]

Runs the case-study shop (demo/shop) under a storm of duplicates: double
clicks, timeouts and retries, resent, reordered and forged payment callbacks,
broker redeliveries, a consumer SIGKILLed between commit and ack, the
outbox relay SIGKILLed between the broker's confirm and its mark, Redis
flushed and killed, reconciliation and refund replays. Then it checks, against
the database and the payment channel's ledger, that every order was charged
exactly once, nothing was paid, shipped or refunded twice or beyond the paid
amount, and no acknowledged order was lost. Exit status 1 on any violation.

With no backend flags everything is embedded (SQLite, the memory store, an
in-process at-least-once queue): no server is needed.

Flags:
`

// errViolations: the storm broke an invariant.
var errViolations = errors.New("invariants violated")

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if shop.IsChild() { // this process is the storm's shipping consumer
		if code := shop.RunChild(); code != 0 {
			return fmt.Errorf("consumer exited with status %d", code)
		}
		return nil
	}
	// go-redis logs every failed dial; the demo's own variant with Redis
	// down would print dozens of them. The demo reports what happened.
	redis.SetLogger(quietRedisLog{})
	fs := newFlags("demo", stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), demoUsage); printFlags(fs.Output(), fs) }
	orders := fs.Int("orders", 2000, "orders in the storm (the default takes about a minute on a small machine); with --compare, per storm: "+strconv.Itoa(compareOrders)+" unless given")
	clients := fs.Int("clients", 16, "concurrent clients")
	kills := fs.Int("kills", 4, "SIGKILLs of the consumer process between commit and ack, and as many of the outbox relay process between confirm and mark")
	compare := fs.Bool("compare", false, "also run the eight anti-patterns and show their damage")
	report := fs.String("report", "", "write a self-contained HTML report to this file")
	pg := fs.String("postgres", "", "PostgreSQL URL (a fresh schema per run, dropped at the end); default SQLite")
	rd := fs.String("redis", "", `Redis: "private" (a redis-server of its own, flushed and killed) or a redis:// URL (never flushed)`)
	queue := fs.String("queue", "", "broker: nats://HOST:PORT (JetStream) or amqp://USER:PASS@HOST:PORT/ (RabbitMQ); default in-process")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *compare && !flagSet(fs, "orders") {
		*orders = compareOrders
	}
	if *orders < 10 {
		return usageErr("--orders must be at least 10")
	}
	if !shop.Supported {
		return fmt.Errorf("not available on %s: the demo SIGKILLs its consumer child process and process groups, which needs a Unix system (Linux, macOS); every other command works here", runtime.GOOS)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := shop.StormConfig{
		Orders: *orders, Clients: *clients, Kills: *kills,
		Backends:     shop.Backends{Postgres: *pg, Redis: *rd, Queue: *queue},
		ChildCommand: func() *exec.Cmd { return exec.Command(self, "demo") },
	}
	if *kills == 0 {
		cfg.Kills = -1
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	fmt.Fprintf(stdout, "idem demo: %d orders on %s\n", *orders, cfg.Backends.Describe())
	rep := shop.Report{Machine: shop.OrderMachine(shop.Disciplined)}
	if *compare {
		c, err := shop.RunCompare(ctx, cfg, cfg.Progress)
		if err != nil {
			return err
		}
		rep.Storm, rep.Compare = c.Baseline, c
		shop.WriteText(stdout, c.Baseline)
		shop.WriteCompareText(stdout, c)
	} else {
		r, err := shop.RunStorm(ctx, cfg)
		if err != nil {
			return err
		}
		rep.Storm = r
		shop.WriteText(stdout, r)
	}
	if *report != "" {
		f, err := os.Create(*report)
		if err != nil {
			return err
		}
		if err := errors.Join(shop.WriteHTML(f, rep), f.Close()); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		fmt.Fprintf(stdout, "\nReport: %s\n", *report)
	}
	if !rep.Storm.OK() {
		return errViolations
	}
	if rep.Compare != nil {
		for _, v := range rep.Compare.Variants {
			if v.Damage() == 0 {
				return fmt.Errorf("anti-pattern %s did no measurable damage in this run", v.Name)
			}
		}
	}
	return nil
}

// compareOrders is --compare's default order count for each of its nine
// storms: every anti-pattern's damage is a share of the orders (the fewest,
// fsm-jump-path's, about one in twelve), so 200 orders show each one
// clearly, and the storms, run at once, finish in about two minutes on a
// loaded two-core machine (BENCHMARKS.md), where eight storms of the
// default 2000 took over nine minutes one after the other.
const compareOrders = 200

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// quietRedisLog drops go-redis's log lines.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
