#!/usr/bin/env bash
# Benchmarks sqlstore on PostgreSQL next to pgbench running the same SQL at
# the same concurrency, and prints the ratio (Go ops/s ÷ pgbench tps).
#
#   bench/sqlstore/run.sh                # 10 s per run, 3 Go runs (median)
#   T=5 COUNT=1 bench/sqlstore/run.sh    # quicker
#
# The pgbench scripts (begin_complete.sql, replay.sql, preload.sql) are
# generated from the Store's own statements by
#   IDEM_UPDATE_PGBENCH=1 go test -run TestPgbenchScripts ./sqlstore/
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
trap 'psql -qX -d "$DB" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"; rm -rf "$OUT"' EXIT
export PGOPTIONS="-c search_path=$SCHEMA"
sed 's/{{table}}/idem_bench/g' sqlstore/migrations/postgres/0001_records.sql | psql -qX -d "$DB"
psql -qX -d "$DB" -f "$DIR/preload.sql"

echo "# pgbench (-M prepared, -T $T)"
for c in 1 8 32; do
	j=$((c < 2 ? c : 2))
	for s in begin_complete replay; do
		tps=$("$PGBENCH" -n -M prepared -f "$DIR/$s.sql" -c "$c" -j "$j" -T "$T" "$DB" | awk '/^tps = /{print $3}')
		echo "$s c=$c $tps" | tee -a "$OUT/pgbench"
	done
done
unset PGOPTIONS

echo "# go test -bench (-benchtime ${T}s -count $COUNT)"
go test -run '^$' -bench '^BenchmarkPostgres$' -benchtime "${T}s" -count "$COUNT" ./sqlstore/ | tee "$OUT/go"

echo
echo "# ratio: sqlstore ops/s ÷ pgbench tps (median of $COUNT Go runs)"
printf '%-16s %4s %12s %12s %12s %7s %7s\n' op c pgbench sqlstore rawSQL store raw
for c in 1 8 32; do
	for s in begin_complete replay; do
		name=$([ "$s" = begin_complete ] && echo BeginComplete || echo Replay)
		pg=$(awk -v s="$s" -v c="c=$c" '$1==s && $2==c {print $3}' "$OUT/pgbench")
		med() { grep -E "^BenchmarkPostgres/$1/c=$c(-[0-9]+)?[[:space:]]" "$OUT/go" | awk '{for(i=1;i<=NF;i++) if($(i)=="ops/s") print $(i-1)}' | sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
		st=$(med "$name")
		raw=$(med "RawSQL/$name")
		awk -v s="$s" -v c="$c" -v pg="$pg" -v st="$st" -v raw="$raw" 'BEGIN{printf "%-16s %4s %12.0f %12.0f %12.0f %6.2fx %6.2fx\n", s, c, pg, st, raw, st/pg, raw/pg}'
	done
done
