#!/usr/bin/env bash
# Compares redisstore (go test -bench) with redis-benchmark running the same
# Lua script (EVALSHA of redisstore/lua/begin.lua) at the same concurrency,
# and prints throughput ratios (go / redis-benchmark; target >= 0.9).
#
#   bench/redisstore/run.sh                 # 127.0.0.1:6379, 5 runs each
#   COUNT=3 N=20000 bench/redisstore/run.sh
#
# Only keys under a fresh prefix are written; they expire within a minute
# and are deleted at the end. The shared server is never flushed.
set -euo pipefail
cd "$(dirname "$0")/../.."

HOST=${REDIS_HOST:-127.0.0.1}
PORT=${REDIS_PORT:-6379}
COUNT=${COUNT:-5}
N=${N:-20000}                          # requests per redis-benchmark run
PAR=$(( 8 * $(nproc) ))                # benchParallelism x GOMAXPROCS
BENCHTIME=${BENCHTIME:-${N}x}
cli() { redis-cli -h "$HOST" -p "$PORT" "$@"; }

PREFIX="idembench_$(head -c6 /dev/urandom | od -An -tx1 | tr -d ' \n'):"
cleanup() { cli --scan --pattern "${PREFIX}*" | xargs -r -n 500 redis-cli -h "$HOST" -p "$PORT" DEL >/dev/null; }
trap cleanup EXIT

SHA=$(cli SCRIPT LOAD "$(cat redisstore/lua/begin.lua)")
FP=$(printf 'f%.0s' $(seq 32))           # 32-byte fingerprint, as the Go side sends
TOK=$(printf 't%.0s' $(seq 16))          # 16-byte token
RESULT=$(printf 'r%.0s' $(seq 64))       # 64-byte result (benchResult)
LEASE=30000000; RET=60000000             # µs, as benchReq
# The replay record: acquired by the script, completed by the complete script.
PAD=$(printf 'x%.0s' $(seq 52))          # key length like Prefix + 64 hex digits
RKEY="${PREFIX}${PAD}replay000000"
cli EVALSHA "$SHA" 1 "$RKEY" "$FP" "$TOK" $LEASE $RET >/dev/null
cli EVAL "$(cat redisstore/lua/complete.lua)" 1 "$RKEY" "$TOK" "$RESULT" >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# rb CONNS ARGS... : median requests/s of COUNT redis-benchmark runs.
rb() {
	local c=$1; shift
	for _ in $(seq "$COUNT"); do
		redis-benchmark -h "$HOST" -p "$PORT" -c "$c" -n "$N" -r 1000000000 --csv "$@" |
			awk -F'"' 'NR==2 {print $4}'
	done | median
}

# gb NAME : median ops/s of COUNT go benchmark runs.
GOOUT=$(mktemp)
go test -run '^$' -bench '^Benchmark(Acquire|Replay|BeginComplete|RawPing)(Parallel)?$' \
	-benchtime "$BENCHTIME" -count "$COUNT" ./redisstore/ >"$GOOUT"
gb() { awk -v n="^Benchmark$1-[0-9]+\$" '$1 ~ n {print 1e9/$3}' "$GOOUT" | median; }

printf '%-28s %6s %14s %14s %7s\n' "operation" "conns" "go ops/s" "r-b ops/s" "ratio"
row() { # label conns go-ops rb-ops
	printf '%-28s %6s %14.0f %14.0f %7.2f\n' "$1" "$2" "$3" "$4" "$(echo "$3 / $4" | bc -l)"
}
ACQ_ARGS=(EVALSHA "$SHA" 1 "${PREFIX}${PAD}__rand_int__" "$FP" "$TOK" $LEASE $RET)
REPLAY_ARGS=(EVALSHA "$SHA" 1 "$RKEY" "$FP" "$TOK" $LEASE $RET)
row "Begin (acquire)"    1    "$(gb Acquire)"          "$(rb 1 "${ACQ_ARGS[@]}")"
row "Begin (acquire)"    "$PAR" "$(gb AcquireParallel)" "$(rb "$PAR" "${ACQ_ARGS[@]}")"
row "Begin (replay)"     1    "$(gb Replay)"           "$(rb 1 "${REPLAY_ARGS[@]}")"
row "Begin (replay)"     "$PAR" "$(gb ReplayParallel)" "$(rb "$PAR" "${REPLAY_ARGS[@]}")"
row "PING (floor)"       1    "$(gb RawPing)"          "$(rb 1 PING)"
row "PING (floor)"       "$PAR" "$(gb RawPingParallel)" "$(rb "$PAR" PING)"
echo
echo "Begin+Complete (go, two round trips): $(gb BeginComplete | xargs printf '%.0f') ops/s serial," \
	"$(gb BeginCompleteParallel | xargs printf '%.0f') ops/s with $PAR goroutines"
rm -f "$GOOUT"
