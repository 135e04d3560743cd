package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Fault is what a Proxy does to the traffic it carries.
type Fault int

// Faults of a Proxy.
const (
	// Pass forwards both ways.
	Pass Fault = iota
	// BlackHole keeps connections open and delivers nothing either way, on
	// open connections and on new ones: a partition that TCP does not notice.
	BlackHole
	// DropReplies delivers client→server data and discards server→client
	// data: commands run on the server, their replies never arrive.
	DropReplies
	// Refuse closes the listener (new connections are refused) and resets
	// every open connection: the server is down.
	Refuse
)

func (f Fault) String() string {
	switch f {
	case Pass:
		return "pass"
	case BlackHole:
		return "black-hole"
	case DropReplies:
		return "drop-replies"
	case Refuse:
		return "refuse"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Proxy is a TCP proxy on loopback in front of a real server, for tests
// that need network faults on a real connection: replies lost after the
// command ran, black holes, resets in mid-reply, refused connections and
// latency. A connection that lost bytes stays stalled until it is closed (its
// stream is corrupt), as on a real network.
type Proxy struct {
	tb     testing.TB
	target string
	addr   string

	mu       sync.Mutex
	ln       net.Listener
	fault    Fault
	latency  time.Duration
	dropNext int
	cutNext  int // bytes of the next reply to forward before a reset; <0: none
	conns    map[*faultConn]struct{}
	closed   bool

	wg sync.WaitGroup

	// acceptedHook, set by a test, runs after Accept returns a connection
	// and before the proxy looks at its fault.
	acceptedHook atomic.Pointer[func()]
}

type faultConn struct {
	client net.Conn
	server net.Conn // nil when the connection was black-holed at accept

	// guarded by Proxy.mu
	stalled     bool // nothing is delivered either way any more
	downStalled bool // server→client data is discarded
}

// New starts a proxy on a free loopback port that forwards to
// target (host:port). It is closed when the test ends.
func New(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("faultproxy: listen: %v", err)
	}
	p := &Proxy{
		tb:      tb,
		target:  target,
		addr:    ln.Addr().String(),
		ln:      ln,
		cutNext: -1,
		conns:   make(map[*faultConn]struct{}),
	}
	p.wg.Add(1)
	go p.accept(ln)
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's address, "127.0.0.1:port". It does not change
// across Refuse and Pass.
func (p *Proxy) Addr() string { return p.addr }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetTarget makes new connections go to target (host:port) and resets
// every open connection, as a virtual IP or an HA proxy that moves to a
// promoted server does: clients reconnect, through the same address, to
// the new server. Failover tests use it to switch their clients.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	p.resetAllLocked()
}

// Set switches the proxy to fault f. Leaving Refuse listens again on the
// same address.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.fault == f {
		p.fault = f
		return
	}
	prev := p.fault
	p.fault = f
	switch {
	case f == Refuse:
		p.ln.Close()
		p.ln = nil
		p.resetAllLocked()
	case prev == Refuse:
		var ln net.Listener
		var err error
		for i := 0; i < 100; i++ { // the port may linger briefly after Close
			if ln, err = net.Listen("tcp", p.addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			p.tb.Errorf("faultproxy: listen again on %s: %v", p.addr, err)
			return
		}
		p.ln = ln
		p.wg.Add(1)
		go p.accept(ln)
	}
}

// Fault returns the current fault.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// SetLatency delays every chunk of data, in both directions, by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// DropNextReply discards the next server→client data on any connection and
// stalls that connection: the command ran on the server, its reply was lost
// on the wire. Calls add up.
func (p *Proxy) DropNextReply() {
	p.mu.Lock()
	p.dropNext++
	p.mu.Unlock()
}

// CutNextReply forwards n bytes of the next server→client data on any
// connection, then resets that connection: a reset in mid-reply.
func (p *Proxy) CutNextReply(n int) {
	if n < 0 {
		n = 0
	}
	p.mu.Lock()
	p.cutNext = n
	p.mu.Unlock()
}

// ResetAll resets (RST) every open connection now.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	p.resetAllLocked()
	p.mu.Unlock()
}

// Conns returns the number of open connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy and resets its connections. It is safe to call more
// than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	p.resetAllLocked()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) resetAllLocked() {
	for c := range p.conns {
		reset(c.client)
		if c.server != nil {
			reset(c.server)
		}
		delete(p.conns, c)
	}
}

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		client, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		if hook := p.acceptedHook.Load(); hook != nil {
			(*hook)()
		}
		fc := &faultConn{client: client}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			reset(client)
			return
		}
		if p.ln != ln {
			// Set(Refuse) closed this listener after Accept returned the
			// connection (and reset every connection it knew of): the
			// server is down for it too. Under load the accept goroutine
			// lagged here, and a connection made just before Refuse
			// passed traffic through the outage.
			p.mu.Unlock()
			reset(client)
			continue
		}
		blackHole := p.fault == BlackHole
		fc.stalled = blackHole
		p.conns[fc] = struct{}{}
		target := p.target
		p.mu.Unlock()

		if !blackHole {
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				p.drop(fc)
				continue
			}
			p.mu.Lock()
			if _, open := p.conns[fc]; !open {
				p.mu.Unlock()
				reset(server)
				continue
			}
			fc.server = server
			p.mu.Unlock()
			p.wg.Add(1)
			go p.pump(fc, false)
		}
		p.wg.Add(1)
		go p.pump(fc, true)
	}
}

// drop forgets fc and resets both its ends.
func (p *Proxy) drop(fc *faultConn) {
	p.mu.Lock()
	delete(p.conns, fc)
	p.mu.Unlock()
	reset(fc.client)
	if fc.server != nil {
		reset(fc.server)
	}
}

// pump copies one direction of fc: up is client→server.
func (p *Proxy) pump(fc *faultConn, up bool) {
	defer p.wg.Done()
	src, dst := fc.server, fc.client
	if up {
		src, dst = fc.client, fc.server
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk, cut, deliver, delay := p.decide(fc, up, buf[:n])
			if delay > 0 {
				time.Sleep(delay)
			}
			if deliver && dst != nil {
				if _, werr := dst.Write(chunk); werr != nil {
					p.drop(fc)
					return
				}
			}
			if cut {
				p.drop(fc)
				return
			}
		}
		if err != nil {
			// Pass the close on: a reset stays a reset, an EOF a close.
			if isReset(err) {
				p.drop(fc)
				return
			}
			p.mu.Lock()
			delete(p.conns, fc)
			p.mu.Unlock()
			fc.client.Close()
			if fc.server != nil {
				fc.server.Close()
			}
			return
		}
	}
}

// decide applies the current fault to one chunk.
func (p *Proxy) decide(fc *faultConn, up bool, b []byte) (chunk []byte, cut, deliver bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delay = p.latency
	switch {
	case fc.stalled:
		return nil, false, false, 0
	case p.fault == BlackHole:
		fc.stalled = true
		return nil, false, false, 0
	case up:
		return b, false, true, delay
	case fc.downStalled:
		return nil, false, false, 0
	case p.fault == DropReplies:
		fc.downStalled = true
		return nil, false, false, 0
	case p.dropNext > 0:
		p.dropNext--
		fc.stalled = true
		return nil, false, false, 0
	case p.cutNext >= 0:
		n := min(p.cutNext, len(b))
		p.cutNext = -1
		return b[:n], true, n > 0, delay
	}
	return b, false, true, delay
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Redirect returns dsn with its host and port replaced by addr, for the DSN
// forms the tests use: URLs (postgres://, mysql://, redis://, nats://,
// amqp://, …) and go-sql-driver/mysql's user@tcp(host:port)/db.
func Redirect(dsn, addr string) string {
	if i := strings.Index(dsn, "@tcp("); i >= 0 {
		rest := dsn[i+len("@tcp("):]
		if j := strings.IndexByte(rest, ')'); j >= 0 {
			return dsn[:i] + "@tcp(" + addr + rest[j:]
		}
	}
	if strings.HasPrefix(dsn, "tcp(") {
		if j := strings.IndexByte(dsn, ')'); j >= 0 {
			return "tcp(" + addr + dsn[j:]
		}
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		panic(fmt.Sprintf("faultproxy.Redirect: cannot find the host in a DSN of the form %q", redactedForm(dsn)))
	}
	u.Host = addr
	return u.String()
}

// redactedForm returns dsn's scheme only, so a panic never prints a password.
func redactedForm(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		return dsn[:i] + "://…"
	}
	return "…"
}
