package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// galeraProvider is Debian's galera-4 library.
const galeraProvider = "/usr/lib/galera/libgalera_smm.so"

// GaleraCluster is a private three-node MariaDB Galera cluster on loopback,
// for tests that kill, isolate and restart database nodes. Every node is a
// mariadbd with its own data directory and ports (client, group
// communication, IST, SST); state transfers use rsync. The cluster is
// stopped (SIGKILL) and its files removed when the test ends.
//
// The group communication links do not go through a TCP forwarder: each
// node tells the others its listen address and they connect to it
// directly, so a forwarder named in wsrep_cluster_address would be
// bypassed after the first contact. Isolate cuts a node off with Galera's
// own gmcast.isolate instead, which drops and refuses every link.
//
// Nodes are reached as root without a password, database "test". Open them
// with the "mysql" driver (go-sql-driver), which the test binary registers.
type GaleraCluster struct {
	tb    testing.TB
	dir   string
	name  string
	user  string // --user for mariadbd when run as root, else ""
	Nodes []*GaleraNode
}

// GaleraNode is one mariadbd of a GaleraCluster.
type GaleraNode struct {
	c     *GaleraCluster
	Index int // 0, 1 or 2
	// Port is the MySQL protocol port; GcommPort the group communication
	// port; ISTPort and SSTPort receive incremental and full state
	// transfers.
	Port, GcommPort, ISTPort, SSTPort int
	dir                               string

	mu   sync.Mutex
	cmd  *exec.Cmd
	died bool // the last mariadbd ended on its own
}

// galeraNodeDied is waitReadyErr's error when a node's mariadbd ended on
// its own while the rig waited (a port taken meanwhile, a failed state
// transfer): the caller may start it again.
type galeraNodeDied struct {
	n   *GaleraNode
	log string
}

func (e *galeraNodeDied) Error() string {
	return fmt.Sprintf("galera node %d (port %d) exited on its own; log:\n%s", e.n.Index+1, e.n.Port, e.log)
}

// galeraStartAttempts bounds how often the rig starts a node that ends
// on its own while it joins.
const galeraStartAttempts = 3

// galeraSize is the number of nodes in a GaleraCluster.
const galeraSize = 3

// galeraReadyTimeout bounds a node's start or rejoin (including a state
// transfer) on a busy machine.
const galeraReadyTimeout = 3 * time.Minute

// StartGalera starts a private three-node Galera cluster: it initialises
// the first node's data directory, bootstraps the cluster on it, lets the
// other two join (each receives a full state transfer), creates the
// database "test" and returns when every node reports wsrep_ready=ON,
// Synced and a cluster of three. It skips (or fails under
// IDEM_REQUIRE_SERVICES=1) when mariadbd, mariadb-install-db, rsync or the
// Galera library is missing.
func StartGalera(tb testing.TB) *GaleraCluster {
	tb.Helper()
	for _, bin := range []string{"mariadbd", "mariadb-install-db", "rsync", "wsrep_sst_rsync"} {
		if _, err := exec.LookPath(bin); err != nil {
			Unavailable(tb, "MariaDB Galera ("+bin+")", err)
		}
	}
	if _, err := os.Stat(galeraProvider); err != nil {
		Unavailable(tb, "MariaDB Galera (galera-4)", err)
	}
	c := &GaleraCluster{tb: tb, name: Name("idem_galera")}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root without --user, and the rsync
		// daemon of a state transfer started by root drops to nobody: run
		// the nodes as mysql.
		u, err := user.Lookup("mysql")
		if err != nil {
			Unavailable(tb, "MariaDB Galera (a mysql user to run mariadbd as root)", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		c.user = "mysql"
	}
	// Not tb.TempDir: its parents are private to this user, and mariadbd
	// runs as mysql.
	dir, err := os.MkdirTemp("", "idem-galera-")
	if err != nil {
		tb.Fatal(err)
	}
	c.dir = dir
	tb.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Kill()
		}
		_ = os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	// A private tmpdir: the servers' temporary files never meet another
	// test's (parallel mariadb-install-db runs in one /tmp have failed
	// on each other's temporary tables).
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o750); err != nil {
		tb.Fatal(err)
	}
	if uid >= 0 {
		if err := os.Chown(filepath.Join(dir, "tmp"), uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range galeraSize {
		n := &GaleraNode{
			c: c, Index: i, dir: filepath.Join(dir, "n"+strconv.Itoa(i+1)),
			Port: FreePort(tb), GcommPort: FreePort(tb), ISTPort: FreePort(tb), SSTPort: FreePort(tb),
		}
		if err := os.Mkdir(n.dir, 0o750); err != nil {
			tb.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Chown(n.dir, uid, gid); err != nil {
				tb.Fatal(err)
			}
		}
		c.Nodes = append(c.Nodes, n)
	}

	// Only the first node is initialised: the others receive its data by a
	// full state transfer when they join.
	first := c.Nodes[0]
	installMariaDB(tb, first.dir, filepath.Join(dir, "tmp"), c.user)
	// The bootstrap node, like a joiner, is started again on fresh ports
	// when it ends on its own: on a busy machine a port FreePort picked
	// may be taken before mariadbd binds it ("Address already in use").
	for attempt := 1; ; attempt++ {
		first.start(true)
		err := first.waitReadyErr(1)
		if err == nil {
			break
		}
		var died *galeraNodeDied
		if !errors.As(err, &died) || attempt == galeraStartAttempts {
			tb.Fatal(err)
		}
		tb.Logf("galera: the bootstrap node ended while starting, starting it again on new ports: %v", err)
		first.mu.Lock()
		first.Port, first.GcommPort, first.ISTPort, first.SSTPort = FreePort(tb), FreePort(tb), FreePort(tb), FreePort(tb)
		first.mu.Unlock()
	}
	// One at a time: a joiner that asks for a state transfer while the
	// only donor is busy with the other waits and retries.
	for _, n := range c.Nodes[1:] {
		c.join(n)
	}
	db := first.open()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS test"); err != nil {
		tb.Fatalf("galera: create database: %v", err)
	}
	// The other nodes apply it in a moment: wait until they have.
	for _, n := range c.Nodes[1:] {
		db := n.open()
		_, err := db.ExecContext(ctx, "SET STATEMENT wsrep_sync_wait = 15 FOR SELECT 1")
		db.Close()
		if err != nil {
			tb.Fatalf("galera: node %d: wait for the cluster's writes: %v", n.Index+1, err)
		}
	}
	return c
}

// join starts nodes (on their data directories, joining the running
// ones) and waits until every node that runs is synced in a cluster of
// all the running nodes. A node that ends on its own meanwhile (on a busy machine a port
// picked by FreePort may have been taken in between, or a state transfer
// failed) is started again on fresh ports, a bounded number of times.
func (c *GaleraCluster) join(nodes ...*GaleraNode) {
	c.tb.Helper()
	for attempt := 1; ; attempt++ {
		for _, n := range nodes {
			n.start(false)
		}
		err := c.waitAll()
		if err == nil {
			return
		}
		var died *galeraNodeDied
		if !errors.As(err, &died) || attempt == galeraStartAttempts {
			c.tb.Fatal(err)
		}
		c.tb.Logf("galera: node %d ended while joining, starting it again on new ports: %v", died.n.Index+1, err)
		n := died.n
		n.mu.Lock()
		n.Port, n.GcommPort, n.ISTPort, n.SSTPort = FreePort(c.tb), FreePort(c.tb), FreePort(c.tb), FreePort(c.tb)
		n.mu.Unlock()
		if !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
}

// waitAll waits until every running node is synced in a cluster of all
// the running nodes.
func (c *GaleraCluster) waitAll() error {
	size := 0
	for _, n := range c.Nodes {
		if n.Running() {
			size++
		}
	}
	for _, n := range c.Nodes {
		if n.Running() {
			if err := n.waitReadyErr(size); err != nil {
				return err
			}
		}
	}
	return nil
}

// Addr is host:port of the node's MySQL protocol port.
func (n *GaleraNode) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port))
}

// DSN is a go-sql-driver DSN for database db on this node, as root,
// with interpolateParams and short timeouts.
func (n *GaleraNode) DSN(db string) string {
	return "root@tcp(" + n.Addr() + ")/" + db + "?interpolateParams=true&timeout=5s"
}

// Running reports whether the node's mariadbd was started and not killed.
func (n *GaleraNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// start runs mariadbd on the node's data directory; bootstrap starts a new
// cluster (--wsrep-new-cluster) instead of joining the others.
func (n *GaleraNode) start(bootstrap bool) {
	n.c.tb.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return
	}
	var peers []string
	for _, p := range n.c.Nodes {
		port := n.GcommPort
		if p != n {
			p.mu.Lock()
			port = p.GcommPort
			p.mu.Unlock()
		}
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(port))
	}
	gcomm := "127.0.0.1:" + strconv.Itoa(n.GcommPort)
	provider := strings.Join([]string{
		"gmcast.listen_addr=tcp://" + gcomm,
		"base_port=" + strconv.Itoa(n.GcommPort),
		"ist.recv_addr=127.0.0.1:" + strconv.Itoa(n.ISTPort),
		"gcache.size=16M",
		// A killed node is evicted after a few seconds instead of 15:
		// short enough for failover tests, long enough for a busy machine.
		"evs.keepalive_period=PT0.5S",
		"evs.suspect_timeout=PT3S",
		"evs.inactive_timeout=PT6S",
		"evs.install_timeout=PT6S",
	}, ";")
	args := []string{
		"--no-defaults",
		"--datadir=" + n.dir,
		"--socket=" + filepath.Join(n.dir, "mysqld.sock"),
		"--tmpdir=" + filepath.Join(n.c.dir, "tmp"),
		"--pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(n.dir, "error.log"),
		"--port=" + strconv.Itoa(n.Port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--innodb-log-file-size=8M",
		"--innodb-buffer-pool-size=32M",
		// The tests kill processes, never the host: the OS's cache keeps
		// every write a killed mariadbd made, so these servers skip their
		// fsyncs (and leave the disk to the other tests). A host crash
		// would lose the last commits of a node; the other nodes hold
		// them.
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-flush-method=nosync",
		"--innodb-doublewrite=0",
		"--max-connections=300",
		"--binlog-format=ROW",
		"--innodb-autoinc-lock-mode=2",
		"--wsrep-on=ON",
		"--wsrep-provider=" + galeraProvider,
		"--wsrep-cluster-name=" + n.c.name,
		"--wsrep-cluster-address=gcomm://" + strings.Join(peers, ","),
		"--wsrep-node-name=n" + strconv.Itoa(n.Index+1),
		"--wsrep-node-address=" + gcomm,
		"--wsrep-sst-method=rsync",
		"--wsrep-sst-receive-address=127.0.0.1:" + strconv.Itoa(n.SSTPort),
		"--wsrep-provider-options=" + provider,
	}
	if n.c.user != "" {
		args = append(args, "--user="+n.c.user)
	}
	if bootstrap {
		args = append(args, "--wsrep-new-cluster")
	}
	cmd := exec.Command("mariadbd", args...)
	// Its own process group: a kill takes the state transfer scripts and
	// their rsync daemon along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.c.tb.Fatalf("start mariadbd: %v", err)
	}
	n.cmd = cmd
	n.died = false
}

// Start restarts a killed node on its data directory and waits until it
// has rejoined the cluster (by IST, or SST when the others' cache no longer
// holds what it missed) and the cluster is three nodes again.
func (n *GaleraNode) Start() {
	n.c.tb.Helper()
	n.c.join(n)
}

// Kill stops the node with SIGKILL and waits for it to exit. Safe to call
// twice.
func (n *GaleraNode) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.cmd = nil
}

// Isolate cuts the node off from the other two (Galera's
// gmcast.isolate=1: it drops its group communication links and refuses new
// ones) while its mariadbd keeps running: the others go on as a two-node
// primary component and the isolated node becomes non-primary and stops
// serving queries. Only a restart ends the isolation.
func (n *GaleraNode) Isolate() error {
	db := n.open()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'")
	return err
}

// WaitSize waits until the node reports itself ready and synced in a
// primary component of size members.
func (n *GaleraNode) WaitSize(size int) {
	n.c.tb.Helper()
	n.waitReady(size)
}

// open returns a one-connection pool on the node, for the rig's own
// queries.
func (n *GaleraNode) open() *sql.DB {
	db, err := n.openErr()
	if err != nil {
		n.c.tb.Fatalf("galera: %v", err)
	}
	return db
}

func (n *GaleraNode) openErr() (*sql.DB, error) {
	db, err := sql.Open("mysql", "root@tcp("+n.Addr()+")/?timeout=2s&readTimeout=10s")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// galeraStatus is what waitReady reads.
type galeraStatus struct {
	ready, state string
	size         int
}

func (n *GaleraNode) status(ctx context.Context, db *sql.DB) (galeraStatus, error) {
	var st galeraStatus
	rows, err := db.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN
		('wsrep_ready', 'wsrep_local_state_comment', 'wsrep_cluster_size')`)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return st, err
		}
		switch strings.ToLower(k) {
		case "wsrep_ready":
			st.ready = v
		case "wsrep_local_state_comment":
			st.state = v
		case "wsrep_cluster_size":
			st.size, _ = strconv.Atoi(v)
		}
	}
	return st, rows.Err()
}

// waitReady fails the test unless the node becomes ready within
// galeraReadyTimeout.
func (n *GaleraNode) waitReady(size int) {
	n.c.tb.Helper()
	if err := n.waitReadyErr(size); err != nil {
		n.c.tb.Fatal(err)
	}
}

// waitReadyErr is waitReady that returns its failure, for use from other
// goroutines.
func (n *GaleraNode) waitReadyErr(size int) error {
	db, err := n.openErr()
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(galeraReadyTimeout)
	var st galeraStatus
	for time.Now().Before(deadline) {
		for _, o := range n.c.Nodes {
			if o.exited() && o.hasDied() {
				return &galeraNodeDied{n: o, log: o.logTail()}
			}
		}
		if !n.Running() {
			return fmt.Errorf("galera node %d was killed while waiting for it", n.Index+1)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err = n.status(ctx, db)
		cancel()
		if err == nil && st.ready == "ON" && st.state == "Synced" && st.size == size {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	var logs strings.Builder
	for _, o := range n.c.Nodes {
		fmt.Fprintf(&logs, "\n--- node %d log:\n%s", o.Index+1, o.logTail())
	}
	return fmt.Errorf("galera node %d (port %d) not ready in a cluster of %d (last status %+v, error %v)%s",
		n.Index+1, n.Port, size, st, err, logs.String())
}

// exited reports whether the node's mariadbd has ended on its own (a
// failed start or state transfer).
func (n *GaleraNode) exited() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return true
	}
	var ws syscall.WaitStatus
	if pid, _ := syscall.Wait4(n.cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid == n.cmd.Process.Pid {
		// Reaped here (exec's Wait would now fail): end what it left
		// behind in its group, such as a state transfer's rsync daemon.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		n.cmd = nil
		n.died = true
		return true
	}
	return false
}

// hasDied reports whether the node's last mariadbd ended on its own (not
// by Kill).
func (n *GaleraNode) hasDied() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.died
}

// logTail returns the end of the node's error log.
func (n *GaleraNode) logTail() string {
	b, err := os.ReadFile(filepath.Join(n.dir, "error.log"))
	if err != nil {
		return err.Error()
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
