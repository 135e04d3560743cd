package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCompletionBash sources the bash script in a real bash with the built
// binary on PATH and asks it for commands, subcommands and flags.
func TestCompletionBash(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash") // Debian ships it; CI has it
	}
	code, script, errs := runCLI(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: %d %s", code, errs)
	}
	dir := t.TempDir()
	if err := os.Symlink(idemBin, filepath.Join(dir, "idem")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "idem.bash"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]string{
		"idem ke":              "keys",
		"idem keys l":          "list",
		"idem keys list --st":  "--state --store",
		"idem proxy --upstr":   "--upstream --upstream-idle-timeout --upstream-timeout",
		"idem completion f":    "fish",
		"idem help che":        "check",
		"idem demo --comp":     "--compare",
		"idem check x --max-r": "--max-requests",
		"idem ou":              "outbox",
		"idem outbox r":        "requeue",
		"idem outbox list --t": "--table",
		"idem migrate --out":   "--outbox --outbox-table",
	} {
		words := strings.Fields(line)
		sh := "source idem.bash; COMP_WORDS=(" + line + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + `; _idem; echo "${COMPREPLY[*]}"`
		cmd := exec.Command(bash, "--norc", "-c", sh)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%q completes to %q (%v), want %q", line, out, err, want)
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		code, out, errs := runCLI(t, "completion", shell)
		if code != 0 {
			t.Errorf("completion %s: %d %s", shell, code, errs)
		}
		for _, c := range commandTable() {
			if !strings.Contains(out, strings.Fields(c.Name)[len(strings.Fields(c.Name))-1]) {
				t.Errorf("completion %s does not name %q", shell, c.Name)
			}
		}
	}
	if code, _, _ := runCLI(t, "completion", "tcsh"); code != 2 {
		t.Errorf("completion tcsh: exit %d, want 2", code)
	}
}
