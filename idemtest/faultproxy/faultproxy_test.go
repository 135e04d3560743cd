package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every byte it reads with the same byte.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string, wait time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFaultProxy(t *testing.T) {
	t.Parallel()
	p := New(t, echoServer(t))

	c := dial(t, p.Addr())
	if got, err := roundTrip(t, c, "hello", 2*time.Second); err != nil || got != "hello" {
		t.Fatalf("pass: %q, %v", got, err)
	}

	// A lost reply stalls its connection; a new one works.
	p.DropNextReply()
	if _, err := roundTrip(t, c, "lost", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("dropped reply: want a read timeout, got %v", err)
	}
	if _, err := roundTrip(t, c, "again", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled connection delivered data: %v", err)
	}
	c2 := dial(t, p.Addr())
	if got, err := roundTrip(t, c2, "fresh", 2*time.Second); err != nil || got != "fresh" {
		t.Fatalf("after drop, new connection: %q, %v", got, err)
	}

	// A cut reply delivers its first bytes, then a reset.
	p.CutNextReply(3)
	got, err := roundTrip(t, c2, "abcdef", 2*time.Second)
	if got != "abc" || !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut: got %q, %v; want \"abc\" then a reset", got, err)
	}

	// Black hole: open, silent, also for new connections.
	p.Set(BlackHole)
	c3 := dial(t, p.Addr())
	if _, err := roundTrip(t, c3, "void", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black hole: want a read timeout, got %v", err)
	}
	p.Set(DropReplies)
	c4 := dial(t, p.Addr())
	if _, err := roundTrip(t, c4, "void", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("drop replies: want a read timeout, got %v", err)
	}

	// Refuse: the port is closed, then open again on Pass.
	p.Set(Refuse)
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("refuse: dial succeeded")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("refuse: want connection refused, got %v", err)
	}
	p.Set(Pass)
	c5 := dial(t, p.Addr())
	if got, err := roundTrip(t, c5, "back", 2*time.Second); err != nil || got != "back" {
		t.Fatalf("after refuse: %q, %v", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns = %d, want 1 (reset ones are gone)", n)
	}

	// ResetAll resets the open connections.
	p.ResetAll()
	c5.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c5.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("ResetAll: want a reset, got %v", err)
	}

	// Latency delays without losing anything.
	p.SetLatency(50 * time.Millisecond)
	c6 := dial(t, p.Addr())
	if got, err := roundTrip(t, c6, "slow", 2*time.Second); err != nil || got != "slow" {
		t.Fatalf("latency: %q, %v", got, err)
	}
}

func TestRedirect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:9/test?sslmode=disable"},
		{"root@tcp(127.0.0.1:3306)/test?parseTime=true", "root@tcp(127.0.0.1:9)/test?parseTime=true"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:9/0"},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:9"},
		{"amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:guest@127.0.0.1:9/"},
	} {
		if got := Redirect(tc.in, "127.0.0.1:9"); got != tc.want {
			t.Errorf("Redirect(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// tagServer writes tag to every connection it accepts, then holds it open
// until the client closes it.
func tagServer(t *testing.T, tag string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); c.Write([]byte(tag)); io.Copy(io.Discard, c) }()
		}
	}()
	return ln.Addr().String()
}

func readTag(t *testing.T, c net.Conn) (string, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// SetTarget moves the proxy to another server: open connections are reset
// (they were to the old server), new ones reach the new server through
// the same address.
func TestSetTarget(t *testing.T) {
	t.Parallel()
	a, b := tagServer(t, "A"), tagServer(t, "B")
	p := New(t, a)
	old := dial(t, p.Addr())
	if tag, err := readTag(t, old); err != nil || tag != "A" {
		t.Fatalf("before SetTarget: %q, %v; want A", tag, err)
	}
	p.SetTarget(b)
	if got := p.Target(); got != b {
		t.Errorf("Target() = %s, want %s", got, b)
	}
	if _, err := readTag(t, old); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection opened before SetTarget: read = %v, want it closed", err)
	}
	if tag, err := readTag(t, dial(t, p.Addr())); err != nil || tag != "B" {
		t.Errorf("after SetTarget: %q, %v; want B", tag, err)
	}
}

// A connection that Accept returned just before Set(Refuse) closed the
// listener is refused too: on a loaded machine the accept goroutine lagged
// between Accept and its look at the fault, and such a connection reached
// the server through the whole outage (redislock's
// TestUnavailableIsNotContention then took a lock "while Redis refused").
func TestRefuseCoversAConnectionBeingAccepted(t *testing.T) {
	t.Parallel()
	p := New(t, echoServer(t))
	accepted, proceed := make(chan struct{}), make(chan struct{})
	hook := func() {
		close(accepted)
		<-proceed
	}
	p.acceptedHook.Store(&hook)
	c := dial(t, p.Addr()) // the kernel completes the handshake
	<-accepted             // and the proxy's Accept has returned it
	p.acceptedHook.Store(nil)
	p.Set(Refuse)
	close(proceed)
	if got, err := roundTrip(t, c, "hello", 5*time.Second); err == nil {
		t.Fatalf("a connection accepted as the proxy started refusing got an answer: %q", got)
	}
	p.Set(Pass)
	c2 := dial(t, p.Addr())
	if got, err := roundTrip(t, c2, "again", 5*time.Second); err != nil || got != "again" {
		t.Fatalf("after Pass: %q, %v", got, err)
	}
}
