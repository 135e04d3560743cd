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

// readMySQLReplication gives the verdict for MySQL and MariaDB, from one
// session of db (so that session settings in the DSN count):
//
//   - Galera (wsrep_on with a provider loaded): a commit returns once
//     every node of the primary component has certified its write set, so
//     the verdict is Synchronous with the other nodes as replicas; Single
//     for a cluster of one; Unknown on a node outside the primary component
//     (it refuses queries anyway); Asynchronous when the session has turned
//     wsrep_on off (its writes are not replicated at all).
//   - Semi-synchronous replication (rpl_semi_sync_master_* on MariaDB and
//     MySQL before 8.0.26, rpl_semi_sync_source_* after): Synchronous when
//     it is enabled, waits AFTER_SYNC and is active. AFTER_COMMIT commits
//     in the engine before the replica acknowledges, so other sessions see
//     (and replay) a result a failover can still lose: Asynchronous, and so
//     is semi-sync that fell back to asynchronous after its timeout.
//   - Otherwise Asynchronous when replicas are attached (binlog dump
//     threads in the process list, or SHOW REPLICA HOSTS), Single when none
//     is.
//   - Unknown when the server refuses to show what is needed (the PROCESS
//     or REPLICATION privileges), with the refusal in the detail.
//
// An error means the server could not be asked at all.
func readMySQLReplication(ctx context.Context, db *sql.DB) (idem.Replication, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return idem.Replication{}, err
	}
	defer conn.Close()
	r := mysqlReplReader{ctx: ctx, conn: conn}
	rep := r.read()
	if r.err != nil {
		return idem.Replication{}, r.err
	}
	return rep, nil
}

// mysqlReplReader reads the variables and counts the verdict needs on one
// connection. err is set when the server could not be reached; a refusal
// by the server (a privilege) is kept in refused instead.
type mysqlReplReader struct {
	ctx     context.Context
	conn    *sql.Conn
	err     error
	refused error
}

// show runs a SHOW … WHERE Variable_name IN (names) statement and returns
// the values by lower-case name; absent variables are absent from the map.
func (r *mysqlReplReader) show(kind string, names ...string) map[string]string {
	out := map[string]string{}
	if r.err != nil {
		return out
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'"
	}
	rows, err := r.conn.QueryContext(r.ctx, "SHOW "+kind+" WHERE Variable_name IN ("+strings.Join(quoted, ", ")+")")
	if err != nil {
		r.fail(err)
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			r.fail(err)
			return out
		}
		out[strings.ToLower(k)] = v
	}
	if err := rows.Err(); err != nil {
		r.fail(err)
	}
	return out
}

// fail records err: a server's answer (it has an error number) as a
// refusal, anything else as unreachable.
func (r *mysqlReplReader) fail(err error) {
	if _, ok := sqlerr.MySQLNumber(err); ok {
		if r.refused == nil {
			r.refused = err
		}
		return
	}
	if r.err == nil {
		r.err = err
	}
}

func (r *mysqlReplReader) read() idem.Replication {
	vars := r.show("VARIABLES", "wsrep_on", "wsrep_provider", "wsrep_sync_wait",
		"rpl_semi_sync_master_enabled", "rpl_semi_sync_master_wait_point", "rpl_semi_sync_master_timeout",
		"rpl_semi_sync_master_wait_for_slave_count",
		"rpl_semi_sync_source_enabled", "rpl_semi_sync_source_wait_point", "rpl_semi_sync_source_timeout",
		"rpl_semi_sync_source_wait_for_replica_count")
	global := r.show("GLOBAL VARIABLES", "wsrep_on")
	status := r.show("GLOBAL STATUS", "wsrep_ready", "wsrep_cluster_size", "wsrep_cluster_status",
		"rpl_semi_sync_master_status", "rpl_semi_sync_master_clients",
		"rpl_semi_sync_source_status", "rpl_semi_sync_source_clients")
	if r.err != nil {
		return idem.Replication{}
	}
	if r.refused != nil {
		return idem.Replication{Mode: idem.ReplicationUnknown, Detail: "replication settings not readable: " + r.refused.Error()}
	}

	if on(global["wsrep_on"]) && vars["wsrep_provider"] != "" && !strings.EqualFold(vars["wsrep_provider"], "none") {
		return galeraVerdict(vars, status)
	}

	replicas, how := r.replicas()
	if r.err != nil {
		return idem.Replication{}
	}

	// MySQL ≥ 8.0.26 renamed master to source (and slave to replica); a
	// server has one set or the other.
	semi := map[string]string{
		"enabled":    vars["rpl_semi_sync_master_enabled"],
		"wait_point": vars["rpl_semi_sync_master_wait_point"],
		"timeout":    vars["rpl_semi_sync_master_timeout"],
		"count":      vars["rpl_semi_sync_master_wait_for_slave_count"],
		"status":     status["rpl_semi_sync_master_status"],
		"clients":    status["rpl_semi_sync_master_clients"],
	}
	prefix := "rpl_semi_sync_master_"
	if _, ok := vars["rpl_semi_sync_source_enabled"]; ok {
		semi = map[string]string{
			"enabled":    vars["rpl_semi_sync_source_enabled"],
			"wait_point": vars["rpl_semi_sync_source_wait_point"],
			"timeout":    vars["rpl_semi_sync_source_timeout"],
			"count":      vars["rpl_semi_sync_source_wait_for_replica_count"],
			"status":     status["rpl_semi_sync_source_status"],
			"clients":    status["rpl_semi_sync_source_clients"],
		}
		prefix = "rpl_semi_sync_source_"
	}
	clients, _ := strconv.Atoi(semi["clients"])
	replicas = max(replicas, clients)
	if replicas > 0 && how == "" {
		how = "semi-synchronous clients"
	}
	attached := plural(replicas, "replica", "replicas") + " attached"
	if how != "" {
		attached += " (" + how + ")"
	}

	if !on(semi["enabled"]) {
		if r.refused != nil {
			return idem.Replication{Mode: idem.ReplicationUnknown, Detail: "replicas not countable: " + r.refused.Error()}
		}
		if replicas == 0 {
			return idem.Replication{Mode: idem.ReplicationSingle, Detail: "no replica attached, " + prefix + "enabled=OFF"}
		}
		return idem.Replication{Mode: idem.ReplicationAsynchronous, Replicas: replicas,
			Detail: attached + ", " + prefix + "enabled=OFF: commits do not wait for a replica"}
	}
	if r.refused != nil && replicas == 0 && !(on(semi["enabled"]) && strings.EqualFold(semi["wait_point"], "AFTER_SYNC") && on(semi["status"])) {
		// Nothing proves that no replica is attached, and commits do
		// not wait for one.
		return idem.Replication{Mode: idem.ReplicationUnknown, Detail: "replicas not countable: " + r.refused.Error()}
	}
	settings := fmt.Sprintf("%senabled=ON %swait_point=%s %stimeout=%sms, semi-synchronous status %s",
		prefix, prefix, semi["wait_point"], prefix, semi["timeout"], strings.ToUpper(semi["status"]))
	switch {
	case !strings.EqualFold(semi["wait_point"], "AFTER_SYNC"):
		return idem.Replication{Mode: idem.ReplicationAsynchronous, Replicas: replicas,
			Detail: attached + ", " + settings + ": AFTER_COMMIT commits in the engine before a replica has the write, " +
				"so other sessions read (and replay) records that a failover can still lose; set " + prefix + "wait_point=AFTER_SYNC"}
	case !on(semi["status"]):
		if replicas == 0 {
			return idem.Replication{Mode: idem.ReplicationSingle, Detail: "no replica attached, " + settings}
		}
		return idem.Replication{Mode: idem.ReplicationAsynchronous, Replicas: replicas,
			Detail: attached + ", " + settings + ": semi-synchronous replication is off (it falls back to asynchronous after " +
				prefix + "timeout without an acknowledgement), so commits do not wait for a replica"}
	}
	waits := 1
	if n, err := strconv.Atoi(semi["count"]); err == nil && n > 0 {
		waits = n // MySQL; MariaDB always waits for one
	}
	return idem.Replication{Mode: idem.ReplicationSynchronous, Replicas: replicas, Waits: waits,
		Detail: fmt.Sprintf("%s, %s, each commit waits for %d", attached, settings, waits)}
}

// galeraVerdict reads a Galera node's state.
func galeraVerdict(vars, status map[string]string) idem.Replication {
	size, _ := strconv.Atoi(status["wsrep_cluster_size"])
	detail := fmt.Sprintf("Galera: wsrep_cluster_size=%s wsrep_cluster_status=%s wsrep_ready=%s wsrep_sync_wait=%s",
		status["wsrep_cluster_size"], status["wsrep_cluster_status"], status["wsrep_ready"], vars["wsrep_sync_wait"])
	switch {
	case !on(vars["wsrep_on"]):
		return idem.Replication{Mode: idem.ReplicationAsynchronous, Replicas: max(size-1, 0),
			Detail: detail + ", but wsrep_on=OFF in the store's session: its writes are not replicated (remove wsrep_on from the DSN)"}
	case !on(status["wsrep_ready"]) || !strings.EqualFold(status["wsrep_cluster_status"], "Primary"):
		return idem.Replication{Mode: idem.ReplicationUnknown, Replicas: max(size-1, 0),
			Detail: detail + ": this node is not in the primary component and accepts no writes"}
	case size <= 1:
		return idem.Replication{Mode: idem.ReplicationSingle, Detail: detail}
	}
	return idem.Replication{Mode: idem.ReplicationSynchronous, Replicas: size - 1, Waits: size - 1, Detail: detail}
}

// replicas counts the replicas attached to the server: binlog dump threads
// in the process list (every replica has one while it is connected; seeing
// other users' threads needs the PROCESS privilege), or, when the process
// list cannot be read, the replicas registered in SHOW REPLICA HOSTS
// (SHOW SLAVE HOSTS before MySQL 8.0.22 and MariaDB 10.5.2; needs
// REPLICATION MASTER ADMIN or REPLICATION SLAVE). how says which one
// counted; a refusal of both is kept in r.refused.
func (r *mysqlReplReader) replicas() (n int, how string) {
	err := r.conn.QueryRowContext(r.ctx,
		`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Binlog Dump', 'Binlog Dump GTID')`).Scan(&n)
	if err == nil {
		var process int
		// Without PROCESS, the list holds only this user's threads, and a
		// count of zero proves nothing.
		perr := r.conn.QueryRowContext(r.ctx,
			`SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE IN ('PROCESS', 'SUPER')
				AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')`).Scan(&process)
		if perr == nil && (process > 0 || n > 0) {
			if n == 0 {
				return 0, ""
			}
			return n, "binlog dump threads"
		}
	}
	if err != nil {
		if _, ok := sqlerr.MySQLNumber(err); !ok {
			r.err = err
			return 0, ""
		}
	}
	for _, q := range []string{"SHOW REPLICA HOSTS", "SHOW SLAVE HOSTS"} {
		rows, err := r.conn.QueryContext(r.ctx, q)
		if err != nil {
			if _, ok := sqlerr.MySQLNumber(err); ok {
				continue // older syntax, or no privilege
			}
			r.err = err
			return 0, ""
		}
		hosts := 0
		for rows.Next() {
			hosts++
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			r.fail(err)
			return 0, ""
		}
		if hosts == 0 {
			return 0, ""
		}
		return hosts, strings.ToLower(q)
	}
	r.refused = fmt.Errorf("neither the process list (PROCESS privilege) nor SHOW REPLICA HOSTS (REPLICATION MASTER ADMIN) is readable")
	return 0, ""
}

// on reports whether a MySQL boolean variable's value is set.
func on(v string) bool {
	switch strings.ToUpper(v) {
	case "ON", "1", "YES", "TRUE":
		return true
	}
	return false
}
