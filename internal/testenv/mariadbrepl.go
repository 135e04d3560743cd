package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// MariaDBPair is a private MariaDB primary with one replica attached by
// classic asynchronous (binlog) replication, on loopback, for tests of what
// a store reports and refuses on such a server. Both are stopped (SIGKILL)
// and their files removed when the test ends. Reach them as root without a
// password, database "test", with the "mysql" driver.
type MariaDBPair struct {
	Primary, Replica *MariaDBServer
}

// MariaDBServer is one mariadbd of a MariaDBPair.
type MariaDBServer struct {
	Port int
	dir  string
	cmd  *exec.Cmd
}

// Addr is host:port of the server.
func (s *MariaDBServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// DSN is a go-sql-driver DSN for database db on the server, as root.
func (s *MariaDBServer) DSN(db string) string {
	return "root@tcp(" + s.Addr() + ")/" + db + "?interpolateParams=true&timeout=5s"
}

// StartMariaDBPair initialises one data directory, copies it for the
// replica, starts the primary with a binary log and the replica pointed at
// it (CHANGE MASTER TO … ; START SLAVE), creates the database "test" on
// the primary and returns once the replica has applied it. It skips (or
// fails under IDEM_REQUIRE_SERVICES=1) without mariadbd.
func StartMariaDBPair(tb testing.TB) *MariaDBPair {
	tb.Helper()
	for _, bin := range []string{"mariadbd", "mariadb-install-db"} {
		if _, err := exec.LookPath(bin); err != nil {
			Unavailable(tb, "MariaDB ("+bin+")", err)
		}
	}
	var runAs string
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("mysql")
		if err != nil {
			Unavailable(tb, "MariaDB (a mysql user to run mariadbd as root)", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		runAs = "mysql"
	}
	dir, err := os.MkdirTemp("", "idem-mariadb-pair-")
	if err != nil {
		tb.Fatal(err)
	}
	p := &MariaDBPair{
		Primary: &MariaDBServer{Port: FreePort(tb), dir: filepath.Join(dir, "primary")},
		Replica: &MariaDBServer{Port: FreePort(tb), dir: filepath.Join(dir, "replica")},
	}
	tb.Cleanup(func() {
		p.Replica.kill()
		p.Primary.kill()
		_ = os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	// A private tmpdir, as for StartGalera.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o750); err != nil {
		tb.Fatal(err)
	}
	if uid >= 0 {
		if err := os.Chown(tmp, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	installMariaDB(tb, p.Primary.dir, tmp, runAs)
	// Both start from the same data; the replica then applies the
	// primary's binary log from its beginning.
	if out, err := exec.Command("cp", "-a", p.Primary.dir, p.Replica.dir).CombinedOutput(); err != nil {
		tb.Fatalf("copy data directory: %v\n%s", err, out)
	}
	if uid >= 0 {
		_ = os.Chown(p.Replica.dir, uid, gid)
	}
	p.Primary.start(tb, runAs, "--server-id=1", "--log-bin=binlog", "--binlog-format=ROW")
	p.Replica.start(tb, runAs, "--server-id=2", "--read-only=ON")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exec1 := func(s *MariaDBServer, stmts ...string) {
		db, err := sql.Open("mysql", s.DSN(""))
		if err != nil {
			tb.Fatal(err)
		}
		defer db.Close()
		for _, q := range stmts {
			if _, err := db.ExecContext(ctx, q); err != nil {
				tb.Fatalf("%s on %s: %v", q, s.Addr(), err)
			}
		}
	}
	exec1(p.Replica,
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=no", p.Primary.Port),
		"START SLAVE")
	exec1(p.Primary, "CREATE DATABASE IF NOT EXISTS test")
	db, err := sql.Open("mysql", p.Replica.DSN(""))
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	for {
		var name string
		err := db.QueryRowContext(ctx, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'test'").Scan(&name)
		if err == nil {
			return p
		}
		if ctx.Err() != nil {
			tb.Fatalf("the replica did not apply the primary's CREATE DATABASE: %v\nreplica log:\n%s", err, p.Replica.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *MariaDBServer) start(tb testing.TB, runAs string, extra ...string) {
	tb.Helper()
	args := append([]string{
		"--no-defaults",
		"--datadir=" + s.dir,
		"--socket=" + filepath.Join(s.dir, "mysqld.sock"),
		"--tmpdir=" + filepath.Join(filepath.Dir(s.dir), "tmp"),
		"--pid-file=" + filepath.Join(s.dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(s.dir, "error.log"),
		"--port=" + strconv.Itoa(s.Port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--innodb-log-file-size=8M",
		"--innodb-buffer-pool-size=32M",
		// No fsyncs, as for StartGalera: nothing here kills the host.
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-flush-method=nosync",
		"--innodb-doublewrite=0",
	}, extra...)
	if runAs != "" {
		args = append(args, "--user="+runAs)
	}
	cmd := exec.Command("mariadbd", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start mariadbd: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(2 * time.Minute)
	db, err := sql.Open("mysql", s.DSN("")+"&readTimeout=5s")
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("private mariadbd on %s did not come up: %v\n%s", s.Addr(), err, s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *MariaDBServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *MariaDBServer) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "error.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// installMariaDB initialises the MariaDB data directory dir (absent or
// empty) with mariadb-install-db, with temporary files in tmp, as runAs
// when not empty. It tries once more after a failure, on an emptied
// directory (its bootstrap server has failed once on a busy machine), and
// fails tb after the second.
func installMariaDB(tb testing.TB, dir, tmp, runAs string) {
	tb.Helper()
	args := []string{"--no-defaults", "--datadir=" + dir, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M", "--tmpdir=" + tmp}
	if runAs != "" {
		args = append(args, "--user="+runAs)
	}
	var out []byte
	var err error
	for range 2 {
		if out, err = exec.Command("mariadb-install-db", args...).CombinedOutput(); err == nil {
			return
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	tb.Fatalf("mariadb-install-db: %v\n%s", err, out)
}
