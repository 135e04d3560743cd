#!/usr/bin/env bash
# Compares onetime token Consume on Redis (go test -bench) with
# redis-benchmark GETDEL at the same concurrency (50 clients), and prints
# medians and ratios. Run from the module root:
#   redis/redistoken/benchcmp.sh [count]
set -euo pipefail
COUNT=${1:-5}
CLIENTS=50 # = GOMAXPROCS(2) x benchParallelism(25) in bench_test.go
HOST=${REDIS_HOST:-127.0.0.1}
PORT=${REDIS_PORT:-6379}

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

N=${BENCH_N:-30000}
# Interleave the Go benchmarks and redis-benchmark, one round at a time, so
# that load from other processes hits both sides alike.
out=""
rb=()
for _ in $(seq "$COUNT"); do
	out+=$(GOMAXPROCS=2 go test -run '^$' -bench 'Consume|Issue|BaselineGETDEL' -benchtime "${N}x" -count 1 ./redis/redistoken | grep '^Benchmark')$'\n'
	r=$(redis-benchmark -h "$HOST" -p "$PORT" -c "$CLIENTS" -n "$N" -r 1000000 -q \
		GETDEL "bench:onetime:getdel:__rand_int__" | tr '\r' '\n' | awk '/requests per second/ {for (i=1;i<=NF;i++) if ($i=="requests") print $(i-1)}' | tail -1)
	rb+=("$r")
done
echo "$out"
printf 'redis-benchmark GETDEL -c %d: %s\n' "$CLIENTS" "${rb[*]}"
opsof() { echo "$out" | awk -v b="^$1-" '$1 ~ b {printf "%.0f\n", 1e9/$3}' | median; }
consume=$(opsof BenchmarkConsume)
issue=$(opsof BenchmarkIssue)
gogetdel=$(opsof BenchmarkBaselineGETDEL)
rbgetdel=$(printf '%s\n' "${rb[@]}" | median)

printf '\n%-40s %12s\n' "operation ($CLIENTS concurrent clients)" "ops/s (median of $COUNT)"
printf '%-40s %12.0f\n' "redis-benchmark GETDEL" "$rbgetdel"
printf '%-40s %12.0f\n' "go-redis GETDEL (same go test run)" "$gogetdel"
printf '%-40s %12.0f\n' "onetime Consume (redistoken, EVALSHA)" "$consume"
printf '%-40s %12.0f\n' "onetime Issue (redistoken, EVALSHA)" "$issue"
awk -v c="$consume" -v r="$rbgetdel" -v g="$gogetdel" 'BEGIN {
	printf "\nConsume / redis-benchmark GETDEL = %.2f\n", c / r
	printf "Consume / go-redis GETDEL        = %.2f\n", c / g
}'
