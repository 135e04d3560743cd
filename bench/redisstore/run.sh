#!/usr/bin/env bash
# Compares redisstore (go test -bench) with redis-benchmark running the same
# Lua script (EVALSHA of redis/redisstore/lua/begin.lua, same key length, same
# argument sizes) at the same concurrency, and prints throughput ratios
# (go / redis-benchmark; the target is >= 0.9).
#
#   bench/redisstore/run.sh                       # 127.0.0.1:6379
#   COUNT=7 N=10000 bench/redisstore/run.sh
#
# On a shared, loaded machine the load drifts by the second, so each pair
# (one go run, then one redis-benchmark run of the same operation) runs back
# to back, COUNT times, and the table shows medians: of each side's ops/s
# and of the per-pair ratios.
#
# Keys are written under a fresh prefix, expire within a minute, and are
# deleted at the end. The shared server is never flushed.
set -euo pipefail
cd "$(dirname "$0")/../.."

HOST=${REDIS_HOST:-127.0.0.1}
PORT=${REDIS_PORT:-6379}
COUNT=${COUNT:-5}
N=${N:-10000}                            # operations per run, both sides
PAR=$(( 8 * $(nproc) ))                  # benchParallelism x GOMAXPROCS
cli() { redis-cli -h "$HOST" -p "$PORT" "$@"; }

BIN=$(mktemp -d)
PREFIX="idembench_$(head -c6 /dev/urandom | od -An -tx1 | tr -d ' \n'):"
cleanup() {
	cli --scan --pattern "${PREFIX}*" | xargs -r -n 1000 redis-cli -h "$HOST" -p "$PORT" UNLINK >/dev/null || true
	rm -rf "$BIN"
}
trap cleanup EXIT
go test -c -o "$BIN/redisstore.test" ./redis/redisstore/

SHA=$(cli SCRIPT LOAD "$(cat redis/redisstore/lua/begin.lua)")
FP=$(printf 'f%.0s' $(seq 32))           # 32-byte fingerprint, as the Go side sends
TOK=$(printf 't%.0s' $(seq 16))          # 16-byte token
RESULT=$(printf 'r%.0s' $(seq 64))       # 64-byte result (benchResult)
LEASE=30000000; RET=60000000             # µs, as benchReq
PAD=$(printf 'x%.0s' $(seq 52))          # key length like a Prefix + 64 hex digits
RKEY="${PREFIX}${PAD}replay000000"
# The replay record: acquired by the begin script, completed by the complete script.
cli EVALSHA "$SHA" 1 "$RKEY" "$FP" "$TOK" $LEASE $RET >/dev/null
cli EVAL "$(cat redis/redisstore/lua/complete.lua)" 1 "$RKEY" "$TOK" "$RESULT" >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# go_ops NAME: ops/s of one go benchmark run.
go_ops() {
	(cd redis/redisstore && IDEM_TEST_REDIS="redis://$HOST:$PORT/0" "$BIN/redisstore.test" \
		-test.run '^$' -test.bench "^Benchmark$1\$" -test.benchtime "${N}x" -test.count 1) |
		awk -v n="^Benchmark$1(-[0-9]+)?\$" '$1 ~ n {print 1e9/$3}'
}
# rb_ops CONNS ARGS...: requests/s of one redis-benchmark run.
rb_ops() {
	local c=$1; shift
	redis-benchmark -h "$HOST" -p "$PORT" -c "$c" -n "$N" -r 1000000000 --csv "$@" | awk -F'"' 'NR==2 {print $4}'
}

printf '%-18s %5s %12s %12s %12s\n' "operation" "conns" "go ops/s" "r-b ops/s" "go/r-b"
# pair LABEL GO_BENCH CONNS REDIS-BENCHMARK-ARGS...
pair() {
	local label=$1 bench=$2 conns=$3; shift 3
	local g r gs="" rs="" ratios=""
	for _ in $(seq "$COUNT"); do
		g=$(go_ops "$bench"); r=$(rb_ops "$conns" "$@")
		gs+="$g"$'\n'; rs+="$r"$'\n'; ratios+="$(echo "$g / $r" | bc -l)"$'\n'
	done
	printf '%-18s %5s %12.0f %12.0f %12.2f\n' "$label" "$conns" \
		"$(printf '%s' "$gs" | median)" "$(printf '%s' "$rs" | median)" "$(printf '%s' "$ratios" | median)"
}
ACQ=(EVALSHA "$SHA" 1 "${PREFIX}${PAD}__rand_int__" "$FP" "$TOK" $LEASE $RET)
REPLAY=(EVALSHA "$SHA" 1 "$RKEY" "$FP" "$TOK" $LEASE $RET)
pair "Begin (acquire)" Acquire          1      "${ACQ[@]}"
pair "Begin (acquire)" AcquireParallel  "$PAR" "${ACQ[@]}"
pair "Begin (replay)"  Replay           1      "${REPLAY[@]}"
pair "Begin (replay)"  ReplayParallel   "$PAR" "${REPLAY[@]}"
pair "PING (floor)"    RawPing          1      PING
pair "PING (floor)"    RawPingParallel  "$PAR" PING

# redisstore against go-redis's bare EvalSha of the same script: what the
# store adds on top of the driver (key building, reply decoding).
printf '\n%-18s %5s %12s %12s %12s\n' "operation" "conns" "redisstore" "raw EvalSha" "store/raw"
gopair() {
	local label=$1 bench=$2 raw=$3 conns=$4
	local g r gs="" rs="" ratios=""
	for _ in $(seq "$COUNT"); do
		g=$(go_ops "$bench"); r=$(go_ops "$raw")
		gs+="$g"$'\n'; rs+="$r"$'\n'; ratios+="$(echo "$g / $r" | bc -l)"$'\n'
	done
	printf '%-18s %5s %12.0f %12.0f %12.2f\n' "$label" "$conns" \
		"$(printf '%s' "$gs" | median)" "$(printf '%s' "$rs" | median)" "$(printf '%s' "$ratios" | median)"
}
gopair "Begin (replay)" Replay         RawEvalShaReplay         1
gopair "Begin (replay)" ReplayParallel RawEvalShaReplayParallel "$PAR"
