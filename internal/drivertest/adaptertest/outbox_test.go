package adaptertest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalTB records the first Fatalf and ends the goroutine, as testing.T
// does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runWait(t *testing.T, stall time.Duration, step func() (int, bool), explain func() string) string {
	t.Helper()
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitProgress(tb, "the thing", stall, step, explain)
	}()
	<-done
	return tb.msg
}

// A pipeline that moves at every poll is waited for however long it takes
// in all (40 polls are far more than the 50 ms allowed without progress).
func TestWaitProgressWaitsForMovingPipeline(t *testing.T) {
	n := 0
	msg := runWait(t, 50*time.Millisecond, func() (int, bool) { n++; return n, n == 40 }, nil)
	if msg != "" || n != 40 {
		t.Fatalf("gave up at poll %d: %s", n, msg)
	}
}

// A pipeline that stops moving fails, with the explanation.
func TestWaitProgressFailsOnStall(t *testing.T) {
	n := 0
	msg := runWait(t, 50*time.Millisecond, func() (int, bool) { n = min(n+1, 5); return n, false }, func() string { return "m-7 missing" })
	if !strings.Contains(msg, "gave up waiting for the thing: no progress for 50ms (at 5)") || !strings.HasSuffix(msg, "\nm-7 missing") {
		t.Fatalf("failure message: %q", msg)
	}
}
