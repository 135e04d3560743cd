package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

func pairReq(name string) idem.BeginRequest {
	return idem.BeginRequest{Key: idem.MustKey("repl", testenv.Name(name)), Fingerprint: idem.FingerprintOf([]byte("r")), Lease: time.Minute, Retention: time.Hour}
}

// beginRefused asserts that Begin refuses because of asynchronous
// replication, with an error that names what to change.
func beginRefused(t *testing.T, s *sqlstore.Store) {
	t.Helper()
	_, err := s.Begin(ctxT(t), pairReq("refused"))
	if !errors.Is(err, idem.ErrAsyncReplication) || !idem.IsUnavailable(err) {
		t.Fatalf("Begin on an asynchronously replicated server = %v; want an error matching ErrAsyncReplication and ErrUnavailable", err)
	}
	for _, want := range []string{"synchronous_standby_names", "AllowAsyncReplication", "--allow-async-replication"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %s: %v", want, err)
		}
	}
}

// eventually retries Begin until it acquires (the Store re-reads the
// server's replication every ReplicationCheck).
func eventually(t *testing.T, s *sqlstore.Store, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := s.Begin(ctxT(t), pairReq("after"))
		if err == nil && c.Outcome == idem.Acquired {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Begin = %v, %v; want Acquired", what, c.Outcome, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantMode(t *testing.T, s *sqlstore.Store, mode idem.ReplicationMode, replicas int) idem.Replication {
	t.Helper()
	rep, err := s.Replication(ctxT(t))
	if err != nil || rep.Mode != mode || rep.Replicas != replicas {
		t.Fatalf("Replication = %+v, %v; want %v with %d replicas", rep, err, mode, replicas)
	}
	return rep
}

// On a primary with an asynchronous standby, Begin refuses until the
// operator allows it; the Store follows the standby going away (single
// server: allowed) and coming back (refused again) within its re-check
// interval. Complete of a claim granted before is not refused. A role
// without pg_monitor reaches the same verdict.
func TestReplicationPostgresAsync(t *testing.T) {
	t.Parallel()
	pair := testenv.StartPGPair(t, testenv.PGPairOptions{Async: true})
	s, _ := pairStore(t, pair, pair.DSN(), sqlstore.Config{ReplicationCheck: 100 * time.Millisecond})
	rep := wantMode(t, s, idem.ReplicationAsynchronous, 1)
	t.Logf("verdict: %v", rep)
	beginRefused(t, s)

	allowed, _ := pairStore(t, pair, pair.DSN(), sqlstore.Config{AllowAsyncReplication: true})
	c, err := allowed.Begin(ctxT(t), pairReq("allowed"))
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin with AllowAsyncReplication = %v, %v; want Acquired", c.Outcome, err)
	}

	// A role that cannot see the senders' details counts them all the
	// same.
	pair.Exec("CREATE ROLE idem_app LOGIN")
	app, _ := pairStoreNoMigrate(t, strings.Replace(pair.DSN(), "postgres://postgres@", "postgres://idem_app@", 1))
	apprep := wantMode(t, app, idem.ReplicationAsynchronous, 1)
	if !strings.Contains(apprep.Detail, "hidden") {
		t.Errorf("a role without pg_monitor: detail %q does not say that the details are hidden", apprep.Detail)
	}

	pair.DetachStandby()
	eventually(t, s, "after the standby detached")
	wantMode(t, s, idem.ReplicationSingle, 0)

	// A claim granted while single survives the standby's return: its
	// Complete is not refused.
	c, err = s.Begin(ctxT(t), pairReq("granted"))
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin on a single server = %v, %v", c.Outcome, err)
	}
	pair.AttachStandby()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := s.Begin(ctxT(t), pairReq("again"))
		if errors.Is(err, idem.ErrAsyncReplication) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an asynchronous standby attached again, Begin still = %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	beginRefused(t, s)
	if err := s.Complete(ctxT(t), c.Owner, []byte("r")); err != nil {
		t.Errorf("Complete of a claim granted before the standby attached = %v; want nil", err)
	}
}

// pairStoreNoMigrate opens a Store on dsn without migrating (a role that
// may not create tables can still read the replication).
func pairStoreNoMigrate(t *testing.T, dsn string) (*sqlstore.Store, *sql.DB) {
	t.Helper()
	db := openDSN(t, "pgx", dsn)
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

// A DSN that sets synchronous_commit=off weakens the session's own
// transactions (a raw INSERT returns although the synchronous standby is
// frozen), but not the Store's writes: each pins synchronous_commit in its
// own statement, so Begin and Complete wait for the standby and fail by
// their deadline. Once the standby thaws, the completed record is there.
// CompleteTx follows the caller's transaction, which PinSynchronousCommit
// makes wait too.
func TestSynchronousCommitPinned(t *testing.T) {
	t.Parallel()
	pair := testenv.StartPGPair(t, testenv.PGPairOptions{})
	offDSN := pair.DSN() + "&options=-c%20synchronous_commit%3Doff"
	for _, level := range []string{"", "remote_apply"} {
		t.Run("level="+level, func(t *testing.T) {
			s, db := pairStore(t, pair, offDSN, sqlstore.Config{SynchronousCommit: level})
			var session string
			if err := db.QueryRowContext(ctxT(t), "SHOW synchronous_commit").Scan(&session); err != nil || session != "off" {
				t.Fatalf("the DSN's synchronous_commit: %q, %v; want off", session, err)
			}
			rep := wantMode(t, s, idem.ReplicationSynchronous, 1)
			if !strings.Contains(rep.Detail, "session synchronous_commit=off") {
				t.Errorf("detail %q does not report the session's level", rep.Detail)
			}
			table := testenv.Name("raw")
			if _, err := db.ExecContext(ctxT(t), "CREATE TABLE "+table+" (x int)"); err != nil {
				t.Fatal(err)
			}
			held, err := s.Begin(ctxT(t), pairReq("held"))
			if err != nil || held.Outcome != idem.Acquired {
				t.Fatalf("Begin with the standby up = %v, %v", held.Outcome, err)
			}

			pair.StopStandby(true)
			defer pair.StopStandby(false)
			// The session's level lets a raw write return without the
			// standby: the DSN weakens what it touches.
			if _, err := db.ExecContext(ctxT(t), "INSERT INTO "+table+" VALUES (1)"); err != nil {
				t.Fatalf("raw INSERT with synchronous_commit=off and the standby frozen: %v (it should not wait)", err)
			}
			// The Store's writes wait for the frozen standby.
			short := func() context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				t.Cleanup(cancel)
				return ctx
			}
			if err := s.Complete(short(), held.Owner, []byte("done")); err == nil {
				t.Error("Complete returned while the synchronous standby is frozen: the DSN's synchronous_commit=off weakened it")
			}
			if _, err := s.Begin(short(), pairReq("blocked")); err == nil {
				t.Error("Begin returned while the synchronous standby is frozen: the DSN's synchronous_commit=off weakened it")
			}
			// CompleteTx: the caller's transaction decides; pinned, it waits.
			tx, err := db.BeginTx(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := sqlstore.PinSynchronousCommit(ctxT(t), tx, level); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctxT(t), "INSERT INTO "+table+" VALUES (2)"); err != nil {
				t.Fatal(err)
			}
			commit := make(chan error, 1)
			go func() { commit <- tx.Commit() }()
			select {
			case err := <-commit:
				t.Errorf("a transaction pinned with PinSynchronousCommit committed (%v) while the synchronous standby is frozen", err)
			case <-time.After(2 * time.Second):
			}

			pair.StopStandby(false)
			if err := <-commit; err != nil {
				t.Errorf("the pinned transaction's commit after the standby thawed: %v", err)
			}
			deadline := time.Now().Add(time.Minute)
			for {
				rec, err := s.Get(ctxT(t), held.Owner.Key)
				if err == nil && rec.State == idem.StateCompleted && string(rec.Result) == "done" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the Complete that waited for the standby: record %+v, %v; want completed", rec, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
