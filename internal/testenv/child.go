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

// KillAtLine is the parent side of a crash test. It runs the test binary
// again as a child process (args select what the child runs, e.g.
// "-test.run=^$" when TestMain takes over on an environment variable; env
// adds NAME=value pairs to this process's environment), reads the child's
// stdout until a line starts with prefix, then SIGKILLs the child and reaps
// it. It returns the rest of that line; with an empty prefix, the child's
// first line.
//
// It fails tb, showing what the child printed on stdout and stderr, when the
// child ends its output (exits) or prints no such line within timeout, or
// when the child is already gone when it is to be killed.
func KillAtLine(tb testing.TB, prefix string, timeout time.Duration, env []string, args ...string) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer // written by exec's copier, read only after Wait
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start child: %v", err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var (
		seen  []string
		rest  string
		found bool
	)
wait:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break wait
			}
			if r, ok := strings.CutPrefix(line, prefix); ok {
				rest, found = r, true
				break wait
			}
			seen = append(seen, line)
		case <-timer.C:
			break wait
		}
	}
	killErr := cmd.Process.Signal(syscall.SIGKILL) // no handler, no cleanup runs
	for range lines {                              // the kill closes the pipe: drain so the reader ends
	}
	waitErr := cmd.Wait()
	if !found {
		tb.Fatalf("child printed no line starting with %q within %v (exit: %v)\nstdout:\n%s\nstderr:\n%s",
			prefix, timeout, waitErr, strings.Join(seen, "\n"), stderr.String())
	}
	if killErr != nil {
		tb.Fatalf("kill child: %v (exit: %v)\nstderr:\n%s", killErr, waitErr, stderr.String())
	}
	return rest
}
