package adapter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/configtest"
)

func TestDoubling(t *testing.T) {
	for _, c := range []struct {
		first, max time.Duration
		attempt    uint64
		want       time.Duration
	}{
		{time.Second, time.Minute, 0, time.Second},
		{time.Second, time.Minute, 1, time.Second},
		{time.Second, time.Minute, 2, 2 * time.Second},
		{time.Second, time.Minute, 6, 32 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{time.Second, time.Minute, 1 << 40, time.Minute},
		{100 * time.Millisecond, 5 * time.Second, 6, 3200 * time.Millisecond},
		{100 * time.Millisecond, 5 * time.Second, 7, 5 * time.Second},
		{100 * time.Millisecond, 10 * time.Second, 8, 10 * time.Second},
	} {
		if got := Doubling(c.first, c.max, c.attempt); got != c.want {
			t.Errorf("Doubling(%v, %v, %d) = %v, want %v", c.first, c.max, c.attempt, got, c.want)
		}
	}
}

func TestCheckConsumer(t *testing.T) {
	if err := CheckConsumer("x", strings.Repeat("c", inbox.MaxIDBytes)); err != nil {
		t.Fatal(err)
	}
	err := CheckConsumer("natsinbox", strings.Repeat("c", inbox.MaxIDBytes+1))
	configtest.Want(t, err, "natsinbox", "Config.Consumer")
	if err == nil || !strings.HasPrefix(err.Error(), "natsinbox: invalid Config.Consumer: is 256 bytes") {
		t.Fatalf("over-long consumer: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	if got := Truncate("abcdef", 3); got != "abc" {
		t.Errorf("Truncate = %q", got)
	}
	if got := Truncate("ab", 3); got != "ab" {
		t.Errorf("Truncate = %q", got)
	}
}

func TestCallHandlerRecoversPanic(t *testing.T) {
	err := CallHandler("x", func() error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "x: the handler panicked: boom") {
		t.Fatalf("err = %v", err)
	}
	want := errors.New("plain")
	if err := CallHandler("x", func() error { return want }); err != want {
		t.Fatalf("err = %v, want the handler's own", err)
	}
}
