package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqlerr"
)

// postgresReplicationQuery reads, in one statement of the Store's own
// session, what decides whether an acknowledged write is on a standby.
//
// pg_stat_replication has one row per WAL sender. A role without
// pg_read_all_stats (or pg_monitor) sees the rows, but every column except
// pid is NULL: it can count the senders, not tell their state or sync_state.
// So the verdict never depends on those columns: standbys counts every
// sender except a base backup in progress (state 'backup', visible only with
// the privilege) and logical replication (a sender whose pid is the active
// pid of a logical slot in pg_replication_slots, which every role may read):
// neither is a server a failover can promote. hidden counts the rows whose
// details were withheld, for the report.
const postgresReplicationQuery = `SELECT pg_is_in_recovery(),
	current_setting('synchronous_commit'),
	current_setting('synchronous_standby_names'),
	count(r.pid),
	count(r.pid) FILTER (WHERE r.sync_state IN ('sync', 'quorum')),
	count(r.pid) FILTER (WHERE r.sync_state = 'potential'),
	count(r.pid) FILTER (WHERE r.state IS NULL)
FROM (SELECT 1) one
LEFT JOIN pg_stat_replication r
	ON r.state IS DISTINCT FROM 'backup'
	AND r.pid NOT IN (SELECT active_pid FROM pg_replication_slots WHERE slot_type = 'logical' AND active_pid IS NOT NULL)`

// readPostgresReplication gives the verdict for PostgreSQL:
//
//   - Unknown when the session is on a standby (pg_is_in_recovery), or
//     when the server refuses to show pg_stat_replication or
//     pg_replication_slots (some managed services);
//   - Synchronous when synchronous_standby_names is set: the Store's own
//     writes pin synchronous_commit to Config.SynchronousCommit (on or
//     remote_apply), so each of them waits for the standbys it names,
//     whether or not one is attached now (without one, writes wait, and
//     fail by their deadline; nothing is acknowledged unreplicated);
//   - Single when it is empty and no standby is attached;
//   - Asynchronous when it is empty and a standby is attached.
func readPostgresReplication(ctx context.Context, db *sql.DB) (idem.Replication, error) {
	var (
		recovery                                bool
		level, names                            string
		standbys, syncs, potentials, hiddenRows int
	)
	err := db.QueryRowContext(ctx, postgresReplicationQuery).Scan(&recovery, &level, &names, &standbys, &syncs, &potentials, &hiddenRows)
	if err != nil {
		if sqlerr.SQLState(err) == "42501" { // insufficient_privilege
			return idem.Replication{Mode: idem.ReplicationUnknown, Detail: "pg_stat_replication or pg_replication_slots not readable by this role: " + err.Error()}, nil
		}
		return idem.Replication{}, err
	}
	return postgresVerdict(recovery, level, names, standbys, syncs, potentials, hiddenRows), nil
}

func postgresVerdict(recovery bool, level, names string, standbys, syncs, potentials, hidden int) idem.Replication {
	var d strings.Builder
	fmt.Fprintf(&d, "synchronous_standby_names=%s session synchronous_commit=%s, %s",
		strconv.Quote(names), level, plural(standbys, "standby", "standbys"))
	switch {
	case hidden > 0:
		fmt.Fprintf(&d, " (sync_state hidden from this role: grant it pg_monitor to see it)")
	case standbys > 0:
		fmt.Fprintf(&d, " (%d sync, %d potential, %d async)", syncs, potentials, standbys-syncs-potentials)
	}
	if recovery {
		return idem.Replication{Mode: idem.ReplicationUnknown, Replicas: standbys,
			Detail: "connected to a standby in recovery, not a primary: " + d.String()}
	}
	if waits := syncStandbysWaited(names); waits > 0 {
		if syncs == 0 && hidden == 0 {
			d.WriteString("; no synchronous standby attached: writes wait for one")
		}
		return idem.Replication{Mode: idem.ReplicationSynchronous, Replicas: standbys, Waits: waits, Detail: d.String()}
	}
	if standbys == 0 {
		return idem.Replication{Mode: idem.ReplicationSingle, Detail: d.String()}
	}
	return idem.Replication{Mode: idem.ReplicationAsynchronous, Replicas: standbys, Detail: d.String()}
}

// syncStandbysWaited returns how many standbys each commit waits for under
// synchronous_standby_names (0: none, asynchronous): "FIRST n (…)",
// "ANY n (…)", "n (…)", or a plain list (one).
func syncStandbysWaited(names string) int {
	s := strings.TrimSpace(names)
	if s == "" {
		return 0
	}
	fields := strings.Fields(strings.NewReplacer("(", " ( ").Replace(s))
	if len(fields) > 0 && (strings.EqualFold(fields[0], "FIRST") || strings.EqualFold(fields[0], "ANY")) {
		fields = fields[1:]
	}
	if len(fields) > 1 && fields[1] == "(" {
		if n, err := strconv.Atoi(fields[0]); err == nil {
			return n
		}
	}
	return 1
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// pinnedLevels are the synchronous_commit levels Config.SynchronousCommit
// accepts: those under which a commit returns only once a synchronous
// standby has the transaction on disk (on) or applied (remote_apply).
// remote_write, local and off return earlier.
var pinnedLevels = map[string]bool{"on": true, "remote_apply": true}

// PinSynchronousCommit sets synchronous_commit to level for the rest of
// the PostgreSQL transaction tx (SET LOCAL, through set_config), so that
// its commit waits for the synchronous standby whatever the connection's
// DSN or role says. level is "on" or "remote_apply"; "" means "on".
//
// Call it inside transactions that hold idem records, when the DSN or the
// role may weaken synchronous_commit: a business transaction that ends
// with CompleteTx, or one that writes an inbox mark. The Store's own
// statements pin themselves (Config.SynchronousCommit); CompleteTx does
// not, because it runs in the caller's transaction, whose level applies.
func PinSynchronousCommit(ctx context.Context, tx Execer, level string) error {
	if tx == nil {
		return configError("tx", "nil Execer")
	}
	if level == "" {
		level = "on"
	}
	if !pinnedLevels[level] {
		return configError("level", fmt.Sprintf("%q: want on or remote_apply (a weaker level acknowledges commits a failover can lose)", level))
	}
	if _, err := tx.ExecContext(ctx, "SELECT set_config('synchronous_commit', $1, true)", level); err != nil {
		return fail(ctx, "pin synchronous_commit", err)
	}
	return nil
}
