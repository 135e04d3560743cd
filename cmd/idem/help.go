package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

const storeDSNs = `Store DSNs:
  memory:                          in-process, gone when the command exits
  sqlite:PATH                      an embedded SQLite file
  postgres://user:pass@host:port/db
  mysql://user:pass@host:port/db   (or the go-sql-driver form user:pass@tcp(host:port)/db)
  redis://[:pass@]host:port/db
`

const helpHelp = `Shows the help of a command: what it does, its arguments and its flags.
"idem help keys get" and "idem keys get --help" print the same text.
`

// printUsage prints the list of commands.
func printUsage(w io.Writer) {
	fmt.Fprint(w, `idem makes "do it again" harmless: an operation retried with the same
idempotency key runs once, and every retry gets the first result.

Usage:
  idem COMMAND [flags] [arguments]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commandTable() {
		if strings.Contains(c.Name, " ") {
			continue // listed under their group
		}
		fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.Summary)
	}
	tw.Flush()
	fmt.Fprint(w, "\n"+storeDSNs+`
Run 'idem help COMMAND' (or 'idem COMMAND --help') for a command's
arguments and flags. The documentation is in the docs/ directory of the
repository: docs/README.md.
`)
}

// subcommands returns the names (last word) of group's subcommands.
func subcommands(group string) []string {
	var out []string
	for _, c := range commandTable() {
		if sub, ok := strings.CutPrefix(c.Name, group+" "); ok {
			out = append(out, sub)
		}
	}
	return out
}

// printCommandHelp prints c's usage line, its description and, when fs is
// not nil, its flags.
func printCommandHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: idem %s %s\n\n", c.Name, c.Args)
	if c.Help != "" {
		fmt.Fprint(w, c.Help)
	} else if c.Summary != "" {
		fmt.Fprintf(w, "%s.\n", strings.ToUpper(c.Summary[:1])+c.Summary[1:])
	}
	if subs := subcommands(c.Name); len(subs) > 0 {
		fmt.Fprint(w, "\nSubcommands:\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, s := range subs {
			sc, _ := findCommand(c.Name + " " + s)
			fmt.Fprintf(tw, "  %s %s\t%s\n", c.Name, s, sc.Summary)
		}
		tw.Flush()
		fmt.Fprintf(w, "\nRun 'idem help %s SUBCOMMAND' for a subcommand's arguments and flags.\n", c.Name)
	}
	if fs == nil {
		return
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, fs)
	}
}

// printFlags lists fs's flags in the form they are typed, --name VALUE.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		switch typ {
		case "":
		case "string", "int", "duration", "value", "uint", "int64", "uint64", "float":
			line += " " + strings.ToUpper(typ)
		default: // named in the usage text with `NAME`
			line += " " + typ
		}
		fmt.Fprintf(w, "%s\n        %s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// runHelp is "idem help [COMMAND [SUBCOMMAND]]".
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stdout)
		return 0
	}
	if args[0] == "help" && len(args) == 1 {
		c, _ := findCommand("help")
		printCommandHelp(stdout, c, nil)
		return 0
	}
	c, rest, ok := lookup(args)
	if !ok || len(rest) > 0 {
		fmt.Fprintf(stderr, "idem help: unknown command %q\nRun 'idem help' for the list of commands.\n", strings.Join(args, " "))
		return 2
	}
	if c.Run == nil {
		printCommandHelp(stdout, c, nil)
		return 0
	}
	// The command's own flag parsing prints its help, flags included.
	return report(c.Name, c.Run(ctx, []string{"--help"}, stdout, stderr), stdout, stderr)
}
