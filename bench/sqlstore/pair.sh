#!/usr/bin/env bash
# Runs bench/sqlstore/run.sh (sqlstore next to pgbench running the same SQL)
# against a private PostgreSQL primary with a synchronous streaming standby,
# so that every commit of both sides waits for the standby:
#
#   bench/sqlstore/pair.sh                 # T=10 COUNT=3, as run.sh
#   T=5 COUNT=1 bench/sqlstore/pair.sh     # quicker
#
# The pair is made with the server binaries (initdb, pg_basebackup -R) on two
# free ports, synchronous_standby_names='*', and removed at the end. As root,
# the servers run as user postgres (initdb refuses root). The script fails
# when pgbench, the benchmark or the standby fails (set -e, pipefail).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)}
ROOT=$(mktemp -d /tmp/idem-benchpair-XXXXXX)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$ROOT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P1=$(free_port)
P2=$(free_port)
cleanup() {
	as_pg "$BIN/pg_ctl" -D "$ROOT/standby" -m immediate stop >/dev/null 2>&1 || true
	as_pg "$BIN/pg_ctl" -D "$ROOT/primary" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$ROOT"
}
trap cleanup EXIT
opts() { echo "-p $1 -k $ROOT -c listen_addresses=127.0.0.1 -c wal_level=replica -c max_wal_senders=10 -c max_connections=100 -c cluster_name=$2"; }
as_pg "$BIN/initdb" -D "$ROOT/primary" -U postgres --auth=trust --no-sync -E UTF8 --no-instructions >/dev/null
as_pg "$BIN/pg_ctl" -D "$ROOT/primary" -o "$(opts "$P1" primary)" -l "$ROOT/primary.log" -w start >/dev/null
# The database first: once synchronous_standby_names is set, every commit
# waits for the standby.
psql -qX -h 127.0.0.1 -p "$P1" -U postgres -d postgres -c "CREATE DATABASE test" >/dev/null
psql -qX -h 127.0.0.1 -p "$P1" -U postgres -d postgres -c "ALTER SYSTEM SET synchronous_standby_names = '*'" -c "SELECT pg_reload_conf()" >/dev/null
as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$P1" -U postgres -D "$ROOT/standby" -R -X stream --checkpoint=fast --no-sync
as_pg "$BIN/pg_ctl" -D "$ROOT/standby" -o "$(opts "$P2" standby)" -l "$ROOT/standby.log" -w start >/dev/null
for _ in $(seq 600); do
	state=$(psql -qXAt -h 127.0.0.1 -p "$P1" -U postgres -d postgres -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'")
	[ "$state" = sync ] && break
	sleep 0.1
done
[ "$state" = sync ] || { echo "the standby did not become synchronous" >&2; exit 1; }
echo "primary 127.0.0.1:$P1, synchronous standby 127.0.0.1:$P2"
PGHOST=127.0.0.1 PGPORT=$P1 PGUSER=postgres PGDATABASE=test \
	IDEM_TEST_POSTGRES="postgres://postgres@127.0.0.1:$P1/test?sslmode=disable" \
	bench/sqlstore/run.sh
# Every commit above waited for the standby: it is still the synchronous one.
state=$(psql -qXAt -h 127.0.0.1 -p "$P1" -U postgres -d postgres -c "SELECT state || '/' || sync_state FROM pg_stat_replication WHERE application_name = 'standby'")
[ "$state" = streaming/sync ] || { echo "the standby is $state after the run, not streaming/sync" >&2; exit 1; }
