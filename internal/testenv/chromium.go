package testenv

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// ChromiumBin is the headless browser the tests run (Debian package
// chromium; .ci/run installs it).
const ChromiumBin = "/usr/bin/chromium"

// Chromium returns a command that runs headless Chromium with args after
// the flags every test needs, or ends tb (Unavailable) when the browser is
// not installed. Chromium forks helpers (zygote, renderer, GPU) that
// inherit its stdout and stderr, and they can outlive the browser process
// when it is killed: a test that waited for those pipes to close then
// waited for ever (a 12-minute kill in CI). So the command runs in its own
// process group, ctx's end kills the whole group, and WaitDelay bounds the
// wait for the pipes after the browser exits.
func Chromium(ctx context.Context, tb testing.TB, args ...string) *exec.Cmd {
	tb.Helper()
	if _, err := os.Stat(ChromiumBin); err != nil {
		Unavailable(tb, "headless Chromium ("+ChromiumBin+", Debian package chromium)", err)
	}
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--no-first-run", "--user-data-dir=" + tb.TempDir()}
	cmd := exec.CommandContext(ctx, ChromiumBin, append(flags, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// killGroup sends SIGKILL to cmd's process group: the process and every
// helper it forked that did not start a group of its own.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err == syscall.ESRCH {
		return os.ErrProcessDone
	}
	return err
}
