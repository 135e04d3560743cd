package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// command is one entry of the command table. A name with a space ("keys
// get") is a subcommand of its first word; an entry without Run ("keys") is
// a group whose help lists its subcommands.
type command struct {
	Name    string // "keys get"
	Args    string // what follows the name in the usage line: flags and positional arguments
	Summary string // one line for the command list
	// Help is the description printed by "idem help NAME" and "idem NAME
	// --help" above the flags; it ends with a newline. Commands that set
	// their FlagSet's Usage themselves (proxy) leave it empty.
	Help string
	Run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commandTable is every command, in the order help lists them. To add one,
// add a line here; its Run parses its flags with newFlags and parseFlags,
// so that help, --help and flag errors work the same for all commands.
func commandTable() []command {
	return []command{
		{Name: "proxy", Args: "--upstream URL [--listen ADDR] [--store DSN] [--cache DSN] [flags]", Summary: "an Idempotency-Key sidecar in front of any HTTP service", Run: runProxy},
		{Name: "migrate", Args: "[--store DSN] [--outbox [--outbox-table TABLE]]", Summary: "create or upgrade the record schema (and the outbox tables); check a Redis server", Help: migrateHelp, Run: runMigrate},
		{Name: "keys", Args: "SUBCOMMAND [flags] [arguments]", Summary: "look at and clean up stored records", Help: keysHelp},
		{Name: "keys get", Args: "[--store DSN] [--scope SCOPE | --header 'NAME: VALUE'...] [--result] [--json] KEY | --digest DIGEST", Summary: "show the record of one key, its stored response decoded", Help: keysGetHelp, Run: runKeysGet},
		{Name: "keys list", Args: "[--store DSN] [--state STATE] [--limit N] [--json]", Summary: "list records: in flight, held, forwarded (Started), completed, released", Help: keysListHelp, Run: runKeysList},
		{Name: "keys resolve", Args: "[--store DSN] (KEY | --digest DIGEST) (--status N [--header 'NAME: VALUE'...] [--body TEXT|@FILE] | --release) [--step NAME]", Summary: "resolve a held key: store its real result, or release it", Help: keysResolveHelp, Run: runKeysResolve},
		{Name: "keys purge", Args: "[--store DSN] [--before DURATION] [--batch N]", Summary: "delete expired records", Help: keysPurgeHelp, Run: runKeysPurge},
		{Name: "outbox", Args: "SUBCOMMAND [flags] [arguments]", Summary: "look at and resolve parked messages of a transactional outbox (package outbox)", Help: outboxHelp},
		{Name: "outbox list", Args: "[--store DSN] [--table TABLE] [--limit N] [--json]", Summary: "list parked messages with the broker's reason", Help: outboxListHelp, Run: runOutboxList},
		{Name: "outbox show", Args: "[--store DSN] [--table TABLE] [--json] ID", Summary: "show one message of the outbox, in any state", Help: outboxShowHelp, Run: runOutboxShow},
		{Name: "outbox requeue", Args: "[--store DSN] [--table TABLE] [--json] ID...", Summary: "make parked messages pending again (after the cause was fixed)", Help: outboxRequeueHelp, Run: runOutboxRequeue},
		{Name: "outbox discard", Args: "[--store DSN] [--table TABLE] [--json] ID...", Summary: "give up pending or parked messages: never published", Help: outboxDiscardHelp, Run: runOutboxDiscard},
		{Name: "demo", Args: "[flags]", Summary: "run the case study (docs/case-study.md): a shop under a duplicate storm", Run: runDemo},
		{Name: "check", Args: "URL [--path P] [--header 'NAME: VALUE'...] [--oracle O] [flags]", Summary: "test any API's Idempotency-Key handling (replays, mismatches, concurrency, scopes)", Run: runCheck},
		{Name: "replay", Args: "FILE... --target URL [--copies N] [--concurrency N] [--delay D] [--credentials FILE] [--oracle O] [flags]", Summary: "replay recorded traffic as a duplicate storm and count the effects", Help: replayHelp, Run: runReplay},
		{Name: "completion", Args: "bash|zsh|fish", Summary: "print a shell completion script", Help: completionHelp, Run: runCompletion},
		{Name: "version", Summary: "print the version of this binary", Help: versionHelp, Run: runVersion},
		{Name: "help", Args: "[COMMAND [SUBCOMMAND]]", Summary: "show the help of a command", Help: helpHelp},
	}
}

// lookup returns the command named by the longest prefix of args, and the
// arguments after its name.
func lookup(args []string) (command, []string, bool) {
	var best command
	n := 0
	for _, c := range commandTable() {
		words := strings.Fields(c.Name)
		if len(words) > n && len(words) <= len(args) && strings.Join(args[:len(words)], " ") == c.Name {
			best, n = c, len(words)
		}
	}
	return best, args[n:], n > 0
}

func findCommand(name string) (command, bool) {
	for _, c := range commandTable() {
		if c.Name == name {
			return c, true
		}
	}
	return command{}, false
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status: 0 success,
// 1 failure, 2 bad usage. Every error is printed once, on one line that
// names the command the user ran.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	switch args[0] {
	case "help":
		return runHelp(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help":
		printUsage(stdout)
		return 0
	case "-v", "-version", "--version":
		args = []string{"version"}
	}
	cmd, rest, ok := lookup(args)
	if !ok {
		fmt.Fprintf(stderr, "idem: unknown command %q\nRun 'idem help' for the list of commands.\n", args[0])
		return 2
	}
	if cmd.Run == nil { // a group: "idem keys", "idem keys frob", "idem keys --help"
		switch {
		case len(rest) > 0 && isHelpFlag(rest[0]):
			printCommandHelp(stdout, cmd, nil)
			return 0
		case len(rest) == 0:
			fmt.Fprintf(stderr, "idem %s: a subcommand is required: %s\n", cmd.Name, strings.Join(subcommands(cmd.Name), ", "))
		default:
			fmt.Fprintf(stderr, "idem %s: unknown subcommand %q (want %s)\n", cmd.Name, rest[0], strings.Join(subcommands(cmd.Name), ", "))
		}
		fmt.Fprintf(stderr, "Run 'idem help %s' for usage.\n", cmd.Name)
		return 2
	}
	return report(cmd.Name, cmd.Run(ctx, rest, stdout, stderr), stdout, stderr)
}

// report turns a command's error into output and an exit status.
func report(name string, err error, stdout, stderr io.Writer) int {
	var help *helpRequest
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		help.print(stdout)
		return 0
	case errors.Is(err, flag.ErrHelp): // a FlagSet not parsed by parseFlags
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "idem %s: %v\nRun 'idem %s --help' for usage.\n", name, unprefixed(strings.TrimPrefix(err.Error(), errUsage.Error()+": ")), name)
		return 2
	}
	fmt.Fprintf(stderr, "idem %s: %s\n", name, unprefixed(oneLine(err.Error())))
	return 1
}

// oneLine joins the lines of a multi-line error message (pgx reports each
// connection attempt on a line of its own) with "; ", dropping repeats.
func oneLine(msg string) string {
	if !strings.Contains(msg, "\n") {
		return msg
	}
	var parts []string
	seen := map[string]bool{}
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		parts = append(parts, strings.TrimSuffix(l, ":"))
	}
	return strings.Join(parts, ": ")
}

func isHelpFlag(s string) bool {
	switch s {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

var errUsage = errors.New("usage")

// usageErr is an error in the command line: run prints it with a pointer to
// the command's --help and exits 2.
func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
}

// unprefixed drops the "idem: " that the library's errors start with
// (*idem.ConfigError): the line already starts with "idem COMMAND: ".
func unprefixed(msg string) string { return strings.TrimPrefix(msg, "idem: ") }

// flagErr turns the flag package's error into a usage error that says what
// to type: an unknown flag names the nearest one, a bad duration shows the
// form ("a duration like 30s"), flags are written --name as in the help.
func flagErr(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		if near := nearestFlag(fs, name); near != "" {
			return usageErr("unknown flag --%s; did you mean --%s?", name, near)
		}
		return usageErr("unknown flag --%s", name)
	}
	var value, name string
	if n, _ := fmt.Sscanf(msg, "invalid value %q for flag -%s", &value, &name); n == 2 {
		name = strings.TrimSuffix(name, ":")
		if f := fs.Lookup(name); f != nil {
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isDuration := g.Get().(time.Duration); isDuration {
					return usageErr("--%s %q: want a duration like 30s, 500ms or 2m", name, value)
				}
			}
		}
		_, reason, _ := strings.Cut(msg, ": ")
		return usageErr("--%s %q: %s", name, value, reason)
	}
	return usageErr("%s", strings.ReplaceAll(msg, " -", " --"))
}

// nearestFlag returns the flag of fs whose name is closest to name (an edit
// distance of at most 2, or name is a prefix of it), or "".
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && f.Name < best {
			best, bestD = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// newFlags returns the FlagSet of the command called name ("keys get"). Its
// Usage prints the command's help; commands may replace it. Parse it with
// parseFlags.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if c, ok := findCommand(name); ok {
		fs.Usage = func() { printCommandHelp(fs.Output(), c, fs) }
	}
	return fs
}

// helpRequest is returned by parseFlags for -h or --help: run prints the
// help to stdout and exits 0.
type helpRequest struct{ print func(w io.Writer) }

func (*helpRequest) Error() string { return "help requested" }
func (*helpRequest) Is(target error) bool {
	return target == flag.ErrHelp
}

// parseFlags parses args. Flags and positional arguments may be mixed
// ("KEY --store DSN"); after "--" everything is positional. The positional
// arguments are fs.Args() afterwards. A flag error becomes a usage error of
// one line (run adds the pointer to --help), not the whole help text; -h
// and --help become a *helpRequest.
func parseFlags(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return &helpRequest{print: func(w io.Writer) {
					fs.SetOutput(w)
					if usage != nil {
						usage()
					} else {
						printFlags(fs.Output(), fs)
					}
					fs.SetOutput(out)
				}}
			}
			return flagErr(fs, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Leave the positional arguments in fs.Args().
	return fs.Parse(append([]string{"--"}, positional...))
}
