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
