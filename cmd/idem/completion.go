package main

import (
	"context"
	"fmt"
	"io"
	"strings"
)

const completionHelp = `Prints a shell completion script for bash, zsh or fish: command and
subcommand names from this binary's command table, and each command's
flags, which the script reads from "idem help COMMAND" when asked, so
they always match the installed binary.

  bash:  source <(idem completion bash)      # or save it in /etc/bash_completion.d/idem
  zsh:   source <(idem completion zsh)       # in ~/.zshrc
  fish:  idem completion fish > ~/.config/fish/completions/idem.fish
`

func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("completion", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("want one shell: bash, zsh or fish")
	}
	switch fs.Arg(0) {
	case "bash":
		fmt.Fprint(stdout, bashCompletion())
	case "zsh":
		fmt.Fprint(stdout, "#compdef idem\n# zsh completion for idem: the bash completion, through bashcompinit.\nautoload -U +X bashcompinit && bashcompinit\n"+bashCompletion())
	case "fish":
		fmt.Fprint(stdout, fishCompletion())
	default:
		return usageErr("unknown shell %q: want bash, zsh or fish", fs.Arg(0))
	}
	return nil
}

// topCommands returns the first words of the command table, in order, and
// the groups (commands with subcommands).
func topCommands() (names []string, groups map[string][]string) {
	groups = map[string][]string{}
	seen := map[string]bool{}
	for _, c := range commandTable() {
		first, _, _ := strings.Cut(c.Name, " ")
		if !seen[first] {
			seen[first] = true
			names = append(names, first)
		}
		if subs := subcommands(first); len(subs) > 0 {
			groups[first] = subs
		}
	}
	return names, groups
}

func bashCompletion() string {
	names, groups := topCommands()
	var b strings.Builder
	b.WriteString(`# bash completion for idem (idem completion bash)
_idem() {
	local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} sub=""
	local commands="` + strings.Join(names, " ") + `"
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		return
	fi
	case "$cmd" in
	help)
		COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		return ;;
	completion)
		COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur"))
		return ;;
`)
	for _, g := range names {
		subs, ok := groups[g]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, `	%s)
		if [ "$COMP_CWORD" -eq 2 ]; then
			COMPREPLY=($(compgen -W "%s" -- "$cur"))
			return
		fi
		sub=${COMP_WORDS[2]} ;;
`, g, strings.Join(subs, " "))
	}
	b.WriteString(`	esac
	if [[ $cur == -* ]]; then
		local flags
		flags=$("${COMP_WORDS[0]}" help $cmd $sub 2>/dev/null | sed -n 's/^  \(--[a-z0-9-]*\).*/\1/p')
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	fi
}
complete -o default -F _idem idem
`)
	return b.String()
}

func fishCompletion() string {
	names, groups := topCommands()
	var b strings.Builder
	b.WriteString("# fish completion for idem (idem completion fish)\ncomplete -c idem -f\n")
	summary := func(name string) string {
		c, _ := findCommand(name)
		return strings.ReplaceAll(c.Summary, "'", `\'`)
	}
	for _, n := range names {
		fmt.Fprintf(&b, "complete -c idem -n __fish_use_subcommand -a %s -d '%s'\n", n, summary(n))
	}
	for _, n := range names {
		if subs, ok := groups[n]; ok {
			for _, s := range subs {
				fmt.Fprintf(&b, "complete -c idem -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a %s -d '%s'\n",
					n, strings.Join(subs, " "), s, summary(n+" "+s))
			}
		}
	}
	fmt.Fprintf(&b, "complete -c idem -n '__fish_seen_subcommand_from help' -a '%s'\n", strings.Join(names, " "))
	b.WriteString("complete -c idem -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	b.WriteString(`# Flags: read from "idem help" for the command on the line.
function __idem_flags
	set -l words (commandline -opc)
	set -l cmd $words[2]
	set -l sub
	if test (count $words) -ge 3; and not string match -q -- '-*' $words[3]
		set sub $words[3]
	end
	idem help $cmd $sub 2>/dev/null | string match -r '^  --[a-z0-9-]+' | string trim
end
complete -c idem -n 'not __fish_use_subcommand; and string match -q -- "-*" (commandline -ct)' -a '(__idem_flags)'
`)
	return b.String()
}
