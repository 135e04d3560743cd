package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// TestFaults runs the shared fault suite on PostgreSQL and MariaDB: the
// shared servers for the network faults, and a private PostgreSQL for the
// restart. SQLite has no network between the store and its file, so no
// case applies to it (its crash behaviour is TestCrash*).
func TestFaults(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, dsn := b.open(t)
			idemtest.RunFaults(t, faultHarness(b, db, dsn, nil))
		})
	}
	t.Run("PostgresPrivateRestart", func(t *testing.T) {
		t.Parallel()
		pg := startPostgres(t)
		db := openDSN(t, "pgx", pg.dsn)
		idemtest.RunFaults(t, faultHarness(backends[0], db, pg.dsn, pg.restart))
	})
}

// faultHarness opens, for each case, a table on db, and stores on it that
// reach the server through any address.
func faultHarness(b backend, db *sql.DB, dsn string, restart func(t *testing.T)) idemtest.FaultHarness {
	return idemtest.FaultHarness{
		Target:  serverAddr(dsn),
		Restart: restart,
		New: func(t *testing.T) func(addr string) idem.Store {
			table := storeTable(newStore(t, b, db))
			dsn := dsn
			if b.dialect == sqlstore.MySQL {
				// One COM_QUERY per statement, as many deployments run the
				// driver, so that a lost reply follows a statement that ran
				// (with server-side prepares it would hit the PREPARE).
				dsn += sep(dsn) + "interpolateParams=true"
			}
			return func(addr string) idem.Store {
				pool, _ := limit(openDSN(t, b.driver, testenv.Redirect(dsn, addr)), "")
				s, err := sqlstore.New(pool, &sqlstore.Config{Dialect: b.dialect, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
	}
}

func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}

// serverAddr returns the host:port of a PostgreSQL URL or a
// go-sql-driver/mysql DSN.
func serverAddr(dsn string) string {
	if i := strings.Index(dsn, "@tcp("); i >= 0 {
		rest := dsn[i+len("@tcp("):]
		return rest[:strings.IndexByte(rest, ')')]
	}
	u, err := url.Parse(dsn)
	if err != nil {
		panic(err)
	}
	return u.Host
}

// privatePostgres is a PostgreSQL server of this test alone, in a temp dir
// on a free port, that the test may stop and restart.
type privatePostgres struct {
	dsn     string
	restart func(t *testing.T)
}

// startPostgres starts a private PostgreSQL with the binaries of the
// installed server (initdb refuses root: the cluster runs as user
// postgres). It skips (or fails under IDEM_REQUIRE_SERVICES=1) when they
// are missing.
func startPostgres(t *testing.T) privatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		testenv.Unavailable(t, "PostgreSQL server binaries (/usr/lib/postgresql/*/bin)", os.ErrNotExist)
	}
	bin := filepath.Dir(bins[len(bins)-1])
	dir, err := os.MkdirTemp("", "idem-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	port := testenv.FreePort(t)
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, name), args...)
		if os.Geteuid() == 0 {
			cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chown", "postgres", dir).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v\n%s", err, out)
		}
	}
	run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=100", port, dir)
	start := func() {
		t.Helper()
		run("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start")
	}
	start()
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop")
		if os.Geteuid() == 0 {
			cmd = exec.Command("runuser", "-u", "postgres", "--", filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop")
		}
		_ = cmd.Run()
	})
	return privatePostgres{
		dsn: "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable",
		// An immediate stop is a crash: no checkpoint, the restart replays
		// the write-ahead log. Every committed write must survive it.
		restart: func(t *testing.T) {
			t.Helper()
			run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
			start()
			waitPort(t, "127.0.0.1:"+strconv.Itoa(port))
		},
	}
}

func waitPort(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server at %s did not come back", addr)
}
