package sqlstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// TestMySQLReplicationSingle: the shared MariaDB has no replica attached
// and no semi-synchronous replication, so the store reports a single
// server and grants claims.
func TestMySQLReplicationSingle(t *testing.T) {
	t.Parallel()
	db, _ := testenv.MySQLDB(t)
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.MySQL, Table: testenv.Name("idem")})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Replication(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shared MariaDB: %v", rep)
	if rep.Mode != idem.ReplicationSingle || rep.Replicas != 0 || rep.Waits != 0 {
		t.Fatalf("Replication() = %+v, want a single server", rep)
	}
}

// checkRefused fails t unless err is the store's refusal to grant a claim
// on an asynchronously replicated server.
func checkRefused(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, idem.ErrAsyncReplication) || !idem.IsUnavailable(err) {
		t.Fatalf("Begin error = %v, want ErrAsyncReplication and unavailable", err)
	}
}

// TestMySQLReplicationPair: a private MariaDB primary with one replica.
// With plain (asynchronous) binlog replication the store reports
// asynchronous replicas and refuses to grant claims unless the operator
// allows it; semi-synchronous replication that waits AFTER_SYNC is
// synchronous; AFTER_COMMIT is not.
func TestMySQLReplicationPair(t *testing.T) {
	t.Parallel()
	pair := testenv.StartMariaDBPair(t)
	db := openDSN(t, "mysql", pair.Primary.DSN("test"))
	table := testenv.Name("idem")
	store := func(t *testing.T, allow bool) *sqlstore.Store {
		t.Helper()
		s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.MySQL, Table: table, AllowAsyncReplication: allow})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(ctxT(t)); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		return s
	}
	begin := func(t *testing.T, s *sqlstore.Store) error {
		t.Helper()
		_, err := s.Begin(ctxT(t), idem.BeginRequest{Key: idem.MustKey("pair", testenv.Name("k")), Lease: time.Minute})
		return err
	}
	replication := func(t *testing.T, s *sqlstore.Store, want idem.ReplicationMode, replicas, waits int) idem.Replication {
		t.Helper()
		rep, err := s.Replication(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v", rep)
		if rep.Mode != want || rep.Replicas != replicas || rep.Waits != waits {
			t.Fatalf("Replication() = %+v, want %v with %d replicas, %d waited for", rep, want, replicas, waits)
		}
		return rep
	}
	sqlExec := func(t *testing.T, dsn string, stmts ...string) {
		t.Helper()
		d := openDSN(t, "mysql", dsn)
		for _, q := range stmts {
			if _, err := d.ExecContext(ctxT(t), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}

	t.Run("Asynchronous", func(t *testing.T) {
		replication(t, store(t, false), idem.ReplicationAsynchronous, 1, 0)
		checkRefused(t, begin(t, store(t, false)))
		if err := begin(t, store(t, true)); err != nil {
			t.Fatalf("Begin with AllowAsyncReplication: %v", err)
		}
	})

	t.Run("Unprivileged", func(t *testing.T) {
		// A user with rights on its database only sees its own threads
		// and may not list replica hosts: nothing proves that no replica
		// is attached, so the verdict is unknown, never single.
		sqlExec(t, pair.Primary.DSN(""),
			"CREATE USER 'idem_limited'@'127.0.0.1'",
			"GRANT ALL ON test.* TO 'idem_limited'@'127.0.0.1'")
		s, err := sqlstore.New(openDSN(t, "mysql", "idem_limited@tcp("+pair.Primary.Addr()+")/test"), &sqlstore.Config{Dialect: sqlstore.MySQL, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		replication(t, s, idem.ReplicationUnknown, 0, 0)
	})

	// Semi-synchronous replication, built into MariaDB: the replica
	// acknowledges each transaction once it has it in its relay log.
	sqlExec(t, pair.Primary.DSN(""),
		"SET GLOBAL rpl_semi_sync_master_timeout = 600000",
		"SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC",
		"SET GLOBAL rpl_semi_sync_master_enabled = ON")
	sqlExec(t, pair.Replica.DSN(""),
		"SET GLOBAL rpl_semi_sync_slave_enabled = ON",
		"STOP SLAVE IO_THREAD",
		"START SLAVE IO_THREAD")
	primary := openDSN(t, "mysql", pair.Primary.DSN(""))
	deadline := time.Now().Add(time.Minute)
	for {
		var name, clients string
		err := primary.QueryRowContext(ctxT(t), "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &clients)
		if err == nil && clients == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not attach as a semi-synchronous client: %q, %v", clients, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	t.Run("SemiSyncAfterSync", func(t *testing.T) {
		replication(t, store(t, false), idem.ReplicationSynchronous, 1, 1)
		if err := begin(t, store(t, false)); err != nil {
			t.Fatalf("Begin: %v", err)
		}
	})

	t.Run("SemiSyncAfterCommit", func(t *testing.T) {
		sqlExec(t, pair.Primary.DSN(""), "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_COMMIT")
		defer sqlExec(t, pair.Primary.DSN(""), "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC")
		rep := replication(t, store(t, false), idem.ReplicationAsynchronous, 1, 0)
		if !strings.Contains(rep.Detail, "AFTER_COMMIT") {
			t.Errorf("Detail %q does not say why AFTER_COMMIT is not enough", rep.Detail)
		}
		checkRefused(t, begin(t, store(t, false)))
	})
}
