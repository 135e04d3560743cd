#!/usr/bin/env bash
# Benchmarks sqlstore on PostgreSQL next to pgbench running the same SQL at
# the same concurrency, and prints the ratio (Go ops/s ÷ pgbench tps).
#
#   bench/sqlstore/run.sh                # 10 s per run, 3 rounds, medians
#   T=5 COUNT=1 bench/sqlstore/run.sh    # quicker
#
# pgbench and `go test -bench` alternate, one configuration at a time, so a
# change in the machine's load hits both sides alike.
#
# The pgbench scripts (begin_complete.sql, replay.sql, preload.sql) are
# generated from the Store's own statements by
#   IDEM_UPDATE_PGBENCH=1 go test -run TestPgbenchScripts ./internal/drivertest/sqlstore
# pgbench runs with -M prepared, as pgx caches prepared statements.
# Needs: go, psql and pgbench, PostgreSQL at $PGHOST (trust auth, database test).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
DB=${PGDATABASE:-test}
T=${T:-10}
COUNT=${COUNT:-3}
PGBENCH=${PGBENCH:-/usr/bin/pgbench}
SCHEMA=idem_bench_$$
DIR=bench/sqlstore
OUT=$(mktemp -d)

psql -qX -d "$DB" -c "CREATE SCHEMA $SCHEMA"
trap 'psql -qX -d "$DB" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1; rm -rf "$OUT"' EXIT
sed 's/{{table}}/idem_bench/g' sqlstore/migrations/postgres/0001_records.sql | PGOPTIONS="-c search_path=$SCHEMA" psql -qX -d "$DB"
PGOPTIONS="-c search_path=$SCHEMA" psql -qX -d "$DB" -f "$DIR/preload.sql"
go test -c -o "$OUT/sqlstore.test" ./internal/drivertest/sqlstore

for round in $(seq "$COUNT"); do
	for c in 1 8 32; do
		j=$((c < 2 ? c : 2))
		for s in begin_complete replay; do
			name=$([ "$s" = begin_complete ] && echo BeginComplete || echo Replay)
			tps=$(PGOPTIONS="-c search_path=$SCHEMA" "$PGBENCH" -n -M prepared -f "$DIR/$s.sql" -c "$c" -j "$j" -T "$T" "$DB" | awk '/^tps = /{print $3}')
			echo "pgbench $s c=$c $tps" | tee -a "$OUT/pgbench"
			(cd internal/drivertest/sqlstore && "$OUT/sqlstore.test" -test.run '^$' -test.bench "^BenchmarkPostgres\$/^(Raw)?$name\$/^c=$c\$" -test.benchtime "${T}s") |
				grep '^Benchmark' | tee -a "$OUT/go"
		done
	done
done

echo
echo "# sqlstore ops/s and the same statements through database/sql (rawSQL), ÷ pgbench tps; medians of $COUNT rounds"
printf '%-16s %4s %10s %10s %10s %7s %7s\n' op c pgbench sqlstore rawSQL store raw
med() { sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
for c in 1 8 32; do
	for s in begin_complete replay; do
		name=$([ "$s" = begin_complete ] && echo BeginComplete || echo Replay)
		pg=$(awk -v s="$s" -v c="c=$c" '$2==s && $3==c {print $4}' "$OUT/pgbench" | med)
		ops() { grep -E "^BenchmarkPostgres/$1/c=$c(-[0-9]+)?[[:space:]]" "$OUT/go" | awk '{for(i=1;i<=NF;i++) if($(i)=="ops/s") print $(i-1)}' | med; }
		st=$(ops "$name")
		raw=$(ops "Raw$name")
		awk -v s="$s" -v c="$c" -v pg="$pg" -v st="$st" -v raw="$raw" 'BEGIN{printf "%-16s %4s %10.0f %10.0f %10.0f %6.2fx %6.2fx\n", s, c, pg, st, raw, st/pg, raw/pg}'
	done
done
