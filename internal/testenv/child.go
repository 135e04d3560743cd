package testenv

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Child is a copy of the test binary running as a separate process, for
// crash tests: the parent waits for a line that says the child reached the
// point of interest, may check what it holds, then kills it with SIGKILL.
type Child struct {
	tb     testing.TB
	cmd    *exec.Cmd
	lines  chan string
	seen   []string
	stderr bytes.Buffer // written by exec's copier, read only after Wait
	done   bool
}

// StartChild runs the test binary again (args select what the child runs,
// e.g. "-test.run=^$" when TestMain takes over on an environment variable;
// env adds NAME=value pairs to this process's environment). The child is
// killed when the test ends, if it is still running.
func StartChild(tb testing.TB, env []string, args ...string) *Child {
	tb.Helper()
	c := &Child{tb: tb, cmd: exec.Command(os.Args[0], args...), lines: make(chan string)}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		tb.Fatalf("start child: %v", err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	tb.Cleanup(func() { c.kill() })
	return c
}

// Line reads the child's stdout until a line starts with prefix and returns
// the rest of that line; with an empty prefix, the next line. It kills the
// child and fails tb, showing what the child printed, when the child exits
// or prints no such line within timeout.
func (c *Child) Line(prefix string, timeout time.Duration) string {
	c.tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				waitErr := c.kill()
				c.tb.Fatalf("child exited (%v) without a line starting with %q\nstdout:\n%s\nstderr:\n%s",
					waitErr, prefix, strings.Join(c.seen, "\n"), c.stderr.String())
			}
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return rest
			}
			c.seen = append(c.seen, line)
		case <-timer.C:
			waitErr := c.kill()
			c.tb.Fatalf("child printed no line starting with %q within %v (exit: %v)\nstdout:\n%s\nstderr:\n%s",
				prefix, timeout, waitErr, strings.Join(c.seen, "\n"), c.stderr.String())
		}
	}
}

// Kill sends SIGKILL (no handler, no cleanup runs in the child) and reaps
// it. It fails tb when the child is already gone.
func (c *Child) Kill() {
	c.tb.Helper()
	if c.done {
		c.tb.Fatal("child already killed")
	}
	if killErr := c.cmd.Process.Signal(syscall.SIGKILL); killErr != nil {
		waitErr := c.kill()
		c.tb.Fatalf("kill child: %v (exit: %v)\nstderr:\n%s", killErr, waitErr, c.stderr.String())
	}
	c.kill()
}

// kill ends and reaps the child once, and returns how it exited.
func (c *Child) kill() error {
	if c.done {
		return nil
	}
	c.done = true
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	for range c.lines { // the kill closes the pipe: drain so the reader ends
	}
	return c.cmd.Wait()
}

// KillAtLine is the parent side of the common crash test: StartChild, wait
// for a line starting with prefix (see Child.Line), SIGKILL the child at
// once. It returns the rest of that line.
func KillAtLine(tb testing.TB, prefix string, timeout time.Duration, env []string, args ...string) string {
	tb.Helper()
	c := StartChild(tb, env, args...)
	rest := c.Line(prefix, timeout)
	c.Kill()
	return rest
}
