package testenv

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/sqldialect"
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
	rest, ok := c.LineWithin(prefix, timeout)
	if !ok {
		waitErr := c.kill()
		c.tb.Fatalf("child printed no line starting with %q within %v (exit: %v)\nstdout:\n%s\nstderr:\n%s",
			prefix, timeout, waitErr, strings.Join(c.seen, "\n"), c.stderr.String())
	}
	return rest
}

// LineWithin is Line that, when no such line comes within d, returns false
// and leaves the child running, so that a parent can watch several children
// at once and kill each as soon as it reports. A child that exits still
// fails tb.
func (c *Child) LineWithin(prefix string, d time.Duration) (string, bool) {
	c.tb.Helper()
	timer := time.NewTimer(d)
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
				return rest, true
			}
			c.seen = append(c.seen, line)
		case <-timer.C:
			return "", false
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

// The crash-child harness for code that writes to a SQL table (fsm,
// optlock): the parent names a dialect, a DSN and a table; the child opens
// the database, does its part (typically a write inside a transaction it
// never commits) and says READY; the parent SIGKILLs it there and checks
// what the database kept.
const (
	sqlChildEnv      = "IDEM_TESTENV_SQL_CHILD" // the dialect; its presence makes RunSQLChild take over
	sqlChildDSNEnv   = "IDEM_TESTENV_SQL_CHILD_DSN"
	sqlChildTableEnv = "IDEM_TESTENV_SQL_CHILD_TABLE"
)

// SQLChild is what a crash child works on: the parent's database, opened
// with DriverName(Dialect), and its table.
type SQLChild struct {
	Dialect sqldialect.Dialect
	DB      *sql.DB
	Table   string
}

// RunSQLChild is the child half: call it first in TestMain. In a process
// started by KillSQLChild it opens the parent's database, runs work, prints
// READY when work returns nil (ERROR and the error, exit status 2,
// otherwise) and then waits for the parent's SIGKILL: it never returns. In
// any other process it returns at once. Whatever work leaves open (a
// transaction, a connection) stays open until the kill.
func RunSQLChild(work func(ctx context.Context, c SQLChild) error) {
	name := os.Getenv(sqlChildEnv)
	if name == "" {
		return
	}
	fail := func(err error) {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	d, err := sqldialect.Parse(name)
	if err != nil {
		fail(err)
	}
	db, err := sql.Open(DriverName(d), os.Getenv(sqlChildDSNEnv))
	if err != nil {
		fail(err)
	}
	if err := work(context.Background(), SQLChild{Dialect: d, DB: db, Table: os.Getenv(sqlChildTableEnv)}); err != nil {
		fail(err)
	}
	fmt.Println("READY")
	time.Sleep(2 * time.Minute) // the parent kills us long before
	os.Exit(3)
}

// KillSQLChild is the parent half: it runs the test binary again as a
// child on table of the database dsn reaches (opened with DriverName(d)),
// with -test.run=^$ so that only TestMain's RunSQLChild runs, waits up to a
// minute for its first line, SIGKILLs it, and fails tb unless that line is
// READY.
func KillSQLChild(tb testing.TB, d sqldialect.Dialect, dsn, table string) {
	tb.Helper()
	line := KillAtLine(tb, "", time.Minute,
		[]string{sqlChildEnv + "=" + d.String(), sqlChildDSNEnv + "=" + dsn, sqlChildTableEnv + "=" + table},
		"-test.run=^$")
	if line != "READY" {
		tb.Fatalf("child said %q, want READY", line)
	}
}
