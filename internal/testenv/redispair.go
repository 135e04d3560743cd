package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisPair is a private Redis master with one replica, whose replication
// link goes through a FaultProxy (Link) so that a test can cut it. Both
// servers are killed when the test ends.
type RedisPair struct {
	tb      testing.TB
	Master  *RedisServer
	Replica *RedisServer
	// Link carries the replica's connection to the master: set it to
	// BlackHole and the master still counts the replica as connected, but
	// no write reaches it and no acknowledgement comes back.
	Link *FaultProxy
}

// StartRedisPair starts a master and a replica of it, and waits until the
// replica has synchronised.
func StartRedisPair(tb testing.TB) *RedisPair {
	tb.Helper()
	p := &RedisPair{tb: tb, Master: NewRedis(tb)}
	p.Master.Extra = []string{"--repl-diskless-sync-delay", "0"}
	p.Master.Start()
	p.Replica, p.Link = StartRedisReplica(tb, p.Master)
	return p
}

// StartRedisReplica starts a private redis-server that replicates master
// through a new FaultProxy, and waits until it has synchronised.
func StartRedisReplica(tb testing.TB, master *RedisServer) (*RedisServer, *FaultProxy) {
	tb.Helper()
	r := NewRedis(tb)
	link := NewFaultProxy(tb, master.Addr())
	r.Extra = replicaArgs(link.Addr())
	r.Start()
	WaitRedisReplica(tb, master, r)
	return r, link
}

// replicaArgs are the redis-server arguments of a replica of addr. A short
// repl-timeout makes a dead link noticed in seconds, not a minute;
// diskless loading, and no delay before a diskless sync once it is
// promoted, because a full sync from a killed master's successor is the
// common case in the failover tests.
func replicaArgs(addr string) []string {
	host, port, _ := net.SplitHostPort(addr)
	return []string{"--replicaof", host, port, "--repl-timeout", "5",
		"--repl-diskless-load", "swapdb", "--repl-diskless-sync-delay", "0"}
}

// ReplicaOf makes r (started, or to be started) a replica of addr through
// its next Start, and, if it runs, at once (REPLICAOF). addr "" makes it a
// master (REPLICAOF NO ONE).
func (s *RedisServer) ReplicaOf(addr string) {
	s.tb.Helper()
	args := []string{"REPLICAOF", "NO", "ONE"}
	s.Extra = nil
	if addr != "" {
		s.Extra = replicaArgs(addr)
		host, port, _ := net.SplitHostPort(addr)
		args = []string{"REPLICAOF", host, port}
	}
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		if _, err := RedisCommand(s.Addr(), args...); err != nil {
			s.tb.Fatalf("%v on %s: %v", args, s.Addr(), err)
		}
	}
}

// WaitRedisReplica waits (up to a minute) until replica reports its link
// to the master up, master lists it online, and it has acknowledged
// everything the master had written when it came online (its first ACK
// may take a second; later writes, of a test that keeps writing, are not
// waited for).
func WaitRedisReplica(tb testing.TB, master, replica *RedisServer) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	target := int64(-1)
	for time.Now().Before(deadline) {
		ri, err1 := RedisInfo(replica.Addr(), "replication")
		mi, err2 := RedisInfo(master.Addr(), "replication")
		last = fmt.Sprintf("replica %v %v; master %v %v", ri, err1, mi, err2)
		if err1 == nil && err2 == nil && ri["master_link_status"] == "up" &&
			strings.Contains(mi["slave0"], "state=online") {
			if target < 0 {
				target, _ = strconv.ParseInt(mi["master_repl_offset"], 10, 64)
			}
			if acked(mi["slave0"]) >= target {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("redis replica %s did not sync with %s within a minute: %s", replica.Addr(), master.Addr(), last)
}

// acked is the offset= field of an INFO replication slaveN line, or -1.
func acked(slave string) int64 {
	for _, f := range strings.Split(slave, ",") {
		if v, ok := strings.CutPrefix(f, "offset="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// RedisInfo runs INFO section on addr and returns its fields.
func RedisInfo(addr, section string) (map[string]string, error) {
	v, err := RedisCommand(addr, "INFO", section)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string)
	for _, line := range strings.Split(v, "\n") {
		line = strings.TrimSpace(line)
		if k, val, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			out[k] = val
		}
	}
	return out, nil
}

// RedisCommand sends one command to addr on a new connection and returns
// its reply as text: a status, an integer or a bulk string (an array is
// refused; a nil reply is ""). An error reply is an error. It gives up after 5 seconds.
func RedisCommand(addr string, args ...string) (string, error) {
	rc, err := dialRedis(addr)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	return rc.do(args...)
}

// redisConn is one RESP connection for the commands testenv sends itself.
type redisConn struct {
	net.Conn
	rd   *bufio.Reader
	addr string
}

func dialRedis(addr string) (*redisConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &redisConn{Conn: c, rd: bufio.NewReader(c), addr: addr}, nil
}

// do sends one command and reads its reply as RedisCommand does, within 5
// seconds.
func (rc *redisConn) do(args ...string) (string, error) {
	_ = rc.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := rc.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := rc.rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("redis %s: empty reply", rc.addr)
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis %s: %s", rc.addr, line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("redis %s: bulk reply %q", rc.addr, line)
		}
		if n < 0 {
			return "", nil // a nil reply
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rc.rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redis %s: unsupported reply %q", rc.addr, line)
}
