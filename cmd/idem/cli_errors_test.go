package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Flag errors say what to type: an unknown flag names the nearest one, a
// bad duration shows the form, and flags are written --name, as in the
// help.
func TestFlagErrorsSayWhatToType(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--leese", "9s"}, "idem proxy: unknown flag --leese; did you mean --lease?\n"},
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--upstream-timout", "9s"}, "idem proxy: unknown flag --upstream-timout; did you mean --upstream-timeout?\n"},
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--lease", "30"}, "idem proxy: --lease \"30\": want a duration like 30s, 500ms or 2m\n"},
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--wait=soon"}, "idem proxy: --wait \"soon\": want a duration like 30s, 500ms or 2m\n"},
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--zzzzzz"}, "idem proxy: unknown flag --zzzzzz\n"},
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--record-keep", "many"}, "idem proxy: --record-keep \"many\": parse error\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		first, _, _ := strings.Cut(stderr.String(), "Run 'idem")
		if first != tc.want {
			t.Errorf("%v: stderr\n%q\nwant\n%q", tc.args, first, tc.want)
		}
	}
}

// An error of the library (*idem.ConfigError, "idem: invalid DSN: …") is
// not prefixed twice: "idem proxy: invalid DSN", not "idem proxy: idem:
// invalid DSN"; the password stays out.
func TestErrorsNotPrefixedTwice(t *testing.T) {
	for _, args := range [][]string{
		{"proxy", "--upstream", "http://127.0.0.1:1", "--store", "postgres://u:secretpw@[bad"},
		{"keys", "list", "--store", "foo:"},
	} {
		var stdout, stderr bytes.Buffer
		run(context.Background(), args, &stdout, &stderr)
		out := stderr.String()
		if !strings.HasPrefix(out, "idem "+args[0]) || !strings.Contains(out, ": invalid DSN: ") {
			t.Errorf("%v: %q, want \"idem %s…: invalid DSN: …\"", args, out, args[0])
		}
		if strings.Contains(out, "idem: ") || strings.Contains(out, "secretpw") {
			t.Errorf("%v: %q: a doubled prefix or the password", args, out)
		}
	}
}

// One placeholder style: every command's help writes a store as --store DSN
// (and --cache DSN), never the flag package's --store STRING.
func TestHelpNamesStoresDSN(t *testing.T) {
	seen := 0
	for _, c := range commandTable() {
		if c.Run == nil {
			continue
		}
		var stdout, stderr bytes.Buffer
		run(context.Background(), append(strings.Fields(c.Name), "--help"), &stdout, &stderr)
		help := stdout.String() + stderr.String()
		for _, flag := range []string{"--store", "--cache"} {
			if strings.Contains(help, flag+" STRING") || strings.Contains(help, flag+" string") {
				t.Errorf("idem %s --help: %s without the DSN placeholder", c.Name, flag)
			}
			if strings.Contains(help, flag+" DSN") {
				seen++
			}
		}
	}
	if seen < 5 {
		t.Errorf("--store DSN appears in %d helps; the commands with a store must show it", seen)
	}
}
