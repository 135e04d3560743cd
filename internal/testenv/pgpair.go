package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/idemtest/faultproxy"
)

// PGPair is a private PostgreSQL primary with a streaming standby, made
// with the server binaries on the machine (initdb, pg_basebackup -R,
// pg_ctl promote), for failover tests. Every server runs in its own
// process group, so a kill takes the postmaster and all its children at
// once, as a host crash does.
//
// Two loopback forwarders (package faultproxy) stand between the parts:
//
//   - the standby's link: primary_conninfo goes through it, so CutStandby
//     (and Failover) can cut the standby off from the primary without
//     stopping either;
//   - the clients' forwarder: DSN reaches the current primary through it,
//     and Failover switches its target to the promoted server, as an
//     operator's virtual IP or HA proxy would.
//
// Servers run as the current user, or as user postgres when the tests run
// as root (initdb refuses root); their directories are removed, and the
// servers killed, when the test ends.
type PGPair struct {
	tb   testing.TB
	bin  string
	root string
	sync bool
	cred *syscall.Credential

	client *faultproxy.Proxy // the clients' forwarder
	link   *faultproxy.Proxy // the standby's replication link

	mu      sync.Mutex
	gen     int
	primary *pgNode
	standby *pgNode // nil after DetachStandby
}

// pgNode is one PostgreSQL server of a pair.
type pgNode struct {
	name string // also its cluster_name, so the standby's application_name
	dir  string // data directory
	port int
	cmd  *exec.Cmd
	log  string
}

func (n *pgNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// PGPairOptions tunes StartPGPair.
type PGPairOptions struct {
	// Async leaves synchronous_standby_names empty: commits do not wait
	// for the standby. By default it is '*', so each commit waits until
	// the standby has it on disk.
	Async bool
}

// StartPGPair initdbs a primary on a free port, makes a standby with
// pg_basebackup -R through the link forwarder, starts it, and returns once
// the standby streams (as the synchronous standby, unless opt.Async). It
// skips (or fails under IDEM_REQUIRE_SERVICES=1) when the PostgreSQL server
// binaries are missing.
func StartPGPair(tb testing.TB, opt PGPairOptions) *PGPair {
	tb.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_basebackup")
	if len(bins) == 0 {
		Unavailable(tb, "PostgreSQL server binaries (/usr/lib/postgresql/*/bin)", os.ErrNotExist)
	}
	p := &PGPair{tb: tb, bin: filepath.Dir(bins[len(bins)-1]), sync: !opt.Async}
	root, err := os.MkdirTemp("", "idem-pgpair-")
	if err != nil {
		tb.Fatal(err)
	}
	p.root = root
	tb.Cleanup(p.close)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("PGPair: running as root, and initdb refuses root: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(root, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}

	primary := p.newNode()
	p.run("initdb", "-D", primary.dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--no-instructions")
	p.start(primary, false)
	p.primary = primary
	names := ""
	if p.sync {
		names = "*"
	}
	// ALTER SYSTEM writes postgresql.auto.conf, which pg_basebackup
	// copies: every standby made from here on, once promoted, asks for a
	// synchronous standby of its own.
	p.psql(primary, "ALTER SYSTEM SET synchronous_standby_names = '"+names+"'")
	p.psql(primary, "SELECT pg_reload_conf()")

	p.client = faultproxy.New(tb, primary.addr())
	p.link = faultproxy.New(tb, primary.addr())
	p.standby = p.makeStandby()
	return p
}

// DSN is a postgres:// URL that reaches the current primary through the
// clients' forwarder, as user postgres, database postgres.
func (p *PGPair) DSN() string {
	return "postgres://postgres@" + p.client.Addr() + "/postgres?sslmode=disable&connect_timeout=5"
}

// PrimaryDSN reaches the current primary directly (not through the
// clients' forwarder).
func (p *PGPair) PrimaryDSN() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "postgres://postgres@" + p.primary.addr() + "/postgres?sslmode=disable&connect_timeout=5"
}

// Exec runs sql on the current primary with psql and returns its output
// (unaligned, tuples only).
func (p *PGPair) Exec(sql string) string {
	p.tb.Helper()
	p.mu.Lock()
	n := p.primary
	p.mu.Unlock()
	return p.psql(n, sql)
}

// CutStandby stops (cut=true) or restores the standby's replication link:
// a black hole, connections stay open and deliver nothing.
func (p *PGPair) CutStandby(cut bool) {
	if cut {
		p.link.Set(faultproxy.BlackHole)
	} else {
		p.link.Set(faultproxy.Pass)
	}
}

// DetachStandby kills the standby and removes it: the primary is then a
// single server (or, with synchronous_standby_names set, one whose
// commits wait for a standby that is not there).
func (p *PGPair) DetachStandby() {
	p.tb.Helper()
	p.mu.Lock()
	n := p.standby
	p.standby = nil
	p.mu.Unlock()
	if n != nil {
		p.kill(n)
		_ = os.RemoveAll(n.dir)
	}
}

// Failover does what an HA manager does when the primary's host dies,
// after a partition: it cuts the standby off from the primary for ~300ms
// (commits wait meanwhile), SIGKILLs the primary's postmaster and every
// process of the server, promotes the standby (pg_ctl promote), switches
// the clients' forwarder to it (resetting the clients' connections), and
// attaches a new standby made from it with pg_basebackup. It returns once
// a query through DSN answers on the new primary and the new standby
// streams.
func (p *PGPair) Failover(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	old, promoted := p.primary, p.standby
	p.mu.Unlock()
	if promoted == nil {
		t.Fatal("PGPair.Failover: no standby to promote (DetachStandby was called)")
	}
	p.CutStandby(true)
	time.Sleep(300 * time.Millisecond)
	p.kill(old) // the old primary is fenced: it cannot take writes any more
	p.run("pg_ctl", "promote", "-D", promoted.dir, "-w", "-t", "120")
	p.waitWritable(promoted)
	p.mu.Lock()
	p.primary, p.standby = promoted, nil
	p.mu.Unlock()
	p.client.SetTarget(promoted.addr())
	_ = os.RemoveAll(old.dir)

	p.link.SetTarget(promoted.addr())
	p.CutStandby(false)
	standby := p.makeStandby()
	p.mu.Lock()
	p.standby = standby
	p.mu.Unlock()

	// The clients' path answers on the new primary.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := p.psqlAt(p.client.Addr(), "SELECT pg_is_in_recovery()")
		if err == nil && out == "f" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PGPair: the new primary does not answer through the clients' forwarder: %v %s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *PGPair) newNode() *pgNode {
	p.mu.Lock()
	p.gen++
	name := fmt.Sprintf("node%d", p.gen)
	p.mu.Unlock()
	dir := filepath.Join(p.root, name)
	return &pgNode{name: name, dir: dir, port: FreePort(p.tb), log: filepath.Join(p.root, name+".log")}
}

// makeStandby makes a standby of the current primary through the link
// forwarder, starts it and waits until the primary reports it streaming.
func (p *PGPair) makeStandby() *pgNode {
	p.tb.Helper()
	n := p.newNode()
	host, port, _ := net.SplitHostPort(p.link.Addr())
	p.run("pg_basebackup", "-h", host, "-p", port, "-U", "postgres", "-D", n.dir,
		"-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	p.start(n, true)
	want := "async"
	if p.sync {
		want = "sync"
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out := p.Exec("SELECT coalesce(string_agg(state || '/' || sync_state, ','), '') FROM pg_stat_replication WHERE application_name = '" + n.name + "'")
		if out == "streaming/"+want {
			return n
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(n.log)
			p.tb.Fatalf("PGPair: standby %s does not stream as %s (pg_stat_replication: %q); its log:\n%s", n.name, want, out, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// start runs postgres on n's data directory in a process group of its
// own and waits until it accepts connections.
func (p *PGPair) start(n *pgNode, standby bool) {
	p.tb.Helper()
	logf, err := os.Create(n.log)
	if err != nil {
		p.tb.Fatal(err)
	}
	defer logf.Close()
	args := []string{"-D", n.dir, "-p", strconv.Itoa(n.port), "-k", n.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "cluster_name=" + n.name,
		"-c", "wal_level=replica", "-c", "max_wal_senders=10", "-c", "wal_keep_size=128MB",
		"-c", "hot_standby=on", "-c", "max_connections=60", "-c", "shared_buffers=16MB",
		"-c", "fsync=on", "-c", "wal_receiver_status_interval=1s", "-c", "wal_retrieve_retry_interval=200ms"}
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		p.tb.Fatalf("PGPair: start postgres: %v", err)
	}
	n.cmd = cmd
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := p.psqlAt(n.addr(), "SELECT pg_is_in_recovery()")
		if err == nil && (out == "t") == standby {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(n.log)
			p.tb.Fatalf("PGPair: %s did not come up: %v %s; its log:\n%s", n.name, err, out, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitWritable waits until n has left recovery.
func (p *PGPair) waitWritable(n *pgNode) {
	p.tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := p.psqlAt(n.addr(), "SELECT pg_is_in_recovery()")
		if err == nil && out == "f" {
			return
		}
		if time.Now().After(deadline) {
			p.tb.Fatalf("PGPair: %s still in recovery after promote: %v %s", n.name, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs n's whole process group (the postmaster and every
// backend, walsender and auxiliary process) and reaps the postmaster.
func (p *PGPair) kill(n *pgNode) {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.cmd = nil
}

// StopStandby freezes (SIGSTOP) or thaws (SIGCONT) every process of the
// standby: a standby that stops answering without closing its
// connections.
func (p *PGPair) StopStandby(stop bool) {
	p.mu.Lock()
	n := p.standby
	p.mu.Unlock()
	if n == nil || n.cmd == nil {
		return
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, sig)
}

func (p *PGPair) close() {
	p.mu.Lock()
	nodes := []*pgNode{p.primary, p.standby}
	p.mu.Unlock()
	for _, n := range nodes {
		if n != nil && n.cmd != nil {
			_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGCONT)
			p.kill(n)
		}
	}
	_ = os.RemoveAll(p.root)
}

// run runs a PostgreSQL binary as the servers' user and fails the test
// when it fails.
func (p *PGPair) run(name string, args ...string) {
	p.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	cmd.Dir = p.root
	if out, err := cmd.CombinedOutput(); err != nil {
		p.tb.Fatalf("PGPair: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func (p *PGPair) psql(n *pgNode, sql string) string {
	p.tb.Helper()
	out, err := p.psqlAt(n.addr(), sql)
	if err != nil {
		p.tb.Fatalf("PGPair: psql on %s: %s: %v", n.name, sql, err)
	}
	return out
}

// psqlAt runs sql with psql against addr and returns its trimmed output.
func (p *PGPair) psqlAt(addr, sql string) (string, error) {
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", host, "-p", port, "-U", "postgres", "-d", "postgres", "-c", sql)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
