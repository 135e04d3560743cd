package redislock

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// faultProxy is a TCP proxy between a Redis client and a server that can
// make the server unreachable (blackhole: bytes in both directions are
// swallowed, connections stay open) or lose one reply (the request reaches
// the server, its answer never reaches the client).
type faultProxy struct {
	ln     net.Listener
	target string

	blackhole atomic.Bool
	dropNext  atomic.Pointer[[]byte] // drop replies on the conn whose request contains this
	dropped   atomic.Int32

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// DropReplyAfter makes the proxy swallow every reply on the first connection
// whose request contains marker, once.
func (p *faultProxy) DropReplyAfter(marker string) {
	m := []byte(marker)
	p.dropNext.Store(&m)
}

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var drop atomic.Bool
		p.wg.Add(2)
		go func() { // client -> server
			defer p.wg.Done()
			defer s.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 && !p.blackhole.Load() {
					if m := p.dropNext.Load(); m != nil && bytes.Contains(buf[:n], *m) && p.dropNext.CompareAndSwap(m, nil) {
						drop.Store(true)
						p.dropped.Add(1)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server -> client
			defer p.wg.Done()
			defer c.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !p.blackhole.Load() && !drop.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *faultProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
