package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// DefaultReplicationCheck is how long a Store trusts what it last read of
// its server's replication, when Config.ReplicationCheck is zero.
const DefaultReplicationCheck = 10 * time.Second

var _ idem.ReplicationReporter = (*Store)(nil)

// replVerdict is what the Store last read of its server's replication.
type replVerdict struct {
	rep idem.Replication
	at  time.Time // when it was read
}

// Replication implements idem.ReplicationReporter: it reads, now, how the
// database server replicates, and makes that the verdict Begin goes by
// until the next re-check.
//
//   - SQLite: always idem.ReplicationSingle (no I/O).
//   - PostgreSQL: from the Store's own session, synchronous_standby_names,
//     the session's synchronous_commit, pg_is_in_recovery() and the rows of
//     pg_stat_replication (see the package doc, section Replication).
//   - MySQL and MariaDB: semi-synchronous replication, Galera or plain
//     replicas.
//
// An error means the server could not be asked (it is unreachable); a
// server that hides what the Store needs gives ReplicationUnknown, not an
// error.
func (s *Store) Replication(ctx context.Context) (idem.Replication, error) {
	rep, err := s.readReplication(ctx)
	if err != nil {
		return idem.Replication{}, fail(ctx, "replication", err)
	}
	s.repl.Store(&replVerdict{rep: rep, at: time.Now()})
	return rep, nil
}

func (s *Store) readReplication(ctx context.Context) (idem.Replication, error) {
	if s.readRepl != nil {
		return s.readRepl(ctx)
	}
	switch s.cfg.Dialect {
	case Postgres:
		return readPostgresReplication(ctx, s.db)
	case MySQL:
		return readMySQLReplication(ctx, s.db)
	}
	return idem.Replication{Mode: idem.ReplicationSingle, Detail: "SQLite: one file, no replicas"}, nil
}

// replicationGate returns nil when Begin may grant claims, and otherwise
// the refusal: an error matching idem.ErrAsyncReplication and
// idem.ErrUnavailable.
//
// It re-reads the server's replication when the verdict is older than
// Config.ReplicationCheck, in the Begin that finds it stale, one reader at
// a time: the other Begins go by the verdict they have. There is no
// background goroutine. The first Begin of a Store waits for the first
// read (and so do the Begins that arrive meanwhile, until their contexts
// end).
func (s *Store) replicationGate(ctx context.Context) error {
	if s.cfg.Dialect == SQLite {
		return nil
	}
	v := s.repl.Load()
	switch {
	case v == nil:
		if err := s.firstRead(ctx); err != nil {
			return err
		}
		v = s.repl.Load()
	case time.Since(v.at) >= s.cfg.ReplicationCheck:
		select {
		case s.replSem <- struct{}{}: // the one refresher
			if cur := s.repl.Load(); cur == v {
				// A failed read keeps the previous verdict: the server
				// did not answer, and Begin's own statement will tell the
				// caller so. The next Begin tries again.
				_, _ = s.Replication(ctx)
			}
			<-s.replSem
			v = s.repl.Load()
		default: // another Begin is reading: go by the current verdict
		}
	}
	if v.rep.Mode == idem.ReplicationAsynchronous && !s.cfg.AllowAsyncReplication {
		return idem.StoreError(ctx, "begin", s.asyncRefusal(v.rep))
	}
	return nil
}

// firstRead reads the verdict for the first time, or waits for the Begin
// that does.
func (s *Store) firstRead(ctx context.Context) error {
	for s.repl.Load() == nil {
		select {
		case s.replSem <- struct{}{}:
			var err error
			if s.repl.Load() == nil {
				_, err = s.Replication(ctx)
			}
			<-s.replSem
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// asyncRefusal is the error Begin returns while the server replicates
// asynchronously and Config.AllowAsyncReplication is false.
func (s *Store) asyncRefusal(rep idem.Replication) error {
	fix := "replicate synchronously (docs/replication.md)"
	switch s.cfg.Dialect {
	case Postgres:
		fix = "set synchronous_standby_names on the primary so that commits wait for a standby (docs/replication.md)"
	case MySQL:
		fix = "enable semi-synchronous replication with rpl_semi_sync_master_wait_point=AFTER_SYNC, or use Galera (docs/replication.md)"
	}
	return fmt.Errorf("%w (%s); the store grants no claims: %s, or accept that a failover may run an acknowledged key again with sqlstore.Config.AllowAsyncReplication (idem proxy --allow-async-replication)",
		idem.ErrAsyncReplication, rep.Detail, fix)
}
