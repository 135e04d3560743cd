#!/bin/sh
# First requests over loopback HTTP: the same handler bare and behind
# httpidem (memstore), served by one process
# (cmd/idem/internal/httpbench/serve), loaded by wrk
# (cmd/idem/internal/httpbench/wrk/first.lua: a new key per request) in
# $R interleaved rounds (bare, idem, then idem, bare, …). Prints each
# round's requests/s, the server's CPU per request (utime+stime from
# /proc), the ratios and the load average at the round's start, then the
# medians of the rounds' ratios, their spread, and each side's medians.
# On a CPU-bound box (wrk and the server share the cores) the throughput
# ratio follows the CPU ratio, which the box's load disturbs less. A non-2xx answer fails the run; socket errors
# are reported. The server is built first, under nice.
#
#   bench/peers/wrk.sh              # R=6 D=5s T=2 C=64
#   SCRIPT=cmd/idem/internal/httpbench/wrk/replay.lua bench/peers/wrk.sh
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
R=${R:-6}
D=${D:-5s}
T=${T:-2}
C=${C:-64}
SCRIPT=${SCRIPT:-$root/cmd/idem/internal/httpbench/wrk/first.lua}
PORT=${PORT:-18081}
command -v wrk >/dev/null || { echo "wrk.sh: wrk is not installed" >&2; exit 2; }
tmp=$(mktemp -d)
pid=""
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; rm -rf "$tmp"' EXIT
(cd "$root" && nice -n 10 go build -o "$tmp/serve" ./cmd/idem/internal/httpbench/serve)
bare=127.0.0.1:$PORT
idem=127.0.0.1:$((PORT + 1))
"$tmp/serve" -bare "$bare" -idem "$idem" >/dev/null 2>&1 &
pid=$!
i=0
until curl -s -o /dev/null "http://$bare/" && curl -s -o /dev/null "http://$idem/"; do
	i=$((i + 1))
	if [ "$i" -ge 50 ]; then echo "wrk.sh: the server does not answer" >&2; exit 1; fi
	sleep 0.2
done
sleep 0.5
kill -0 "$pid" 2>/dev/null || { echo "wrk.sh: the server did not start (port $PORT or $((PORT + 1)) in use? set PORT)" >&2; exit 1; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# rate ADDR: "REQ/S CPU" where CPU is the server process's utime+stime
# per request in µs (from /proc, over the wrk run); fails on a non-2xx
# answer, warns of socket errors (timeouts on a loaded machine).
rate() {
	t0=$(ticks)
	wrk -t"$T" -c"$C" -d"$D" -s "$SCRIPT" "http://$1/charges" >"$tmp/out"
	t1=$(ticks)
	if grep -q 'Non-2xx' "$tmp/out"; then
		echo "wrk.sh: $1:" >&2
		cat "$tmp/out" >&2
		exit 1
	fi
	if grep -q 'Socket errors' "$tmp/out"; then
		echo "wrk.sh: $1: $(grep 'Socket errors' "$tmp/out")" >&2
	fi
	awk -v t=$((t1 - t0)) -v hz="$hz" '/requests in/ {n = $1} /Requests\/sec/ {rps = $2} END {printf "%s %.1f\n", rps, t * 1000000 / hz / n}' "$tmp/out"
}
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# Warm up both sides (connections, the store's first shards).
rate "$bare" >/dev/null
rate "$idem" >/dev/null
echo "load average: $(loadavg)"
: >"$tmp/rounds"
for r in $(seq 1 "$R"); do
	la=$(cut -d' ' -f1 /proc/loadavg)
	if [ $((r % 2)) -eq 1 ]; then
		b=$(rate "$bare"); i=$(rate "$idem"); order="bare idem"
	else
		i=$(rate "$idem"); b=$(rate "$bare"); order="idem bare"
	fi
	# bare req/s, bare CPU, idem req/s, idem CPU, ratio, CPU ratio (bare's ÷ idem's)
	line=$(echo "$b $i" | awk '{printf "%s %s %s %s %.3f %.3f", $1, $2, $3, $4, $3 / $1, $2 / $4}')
	echo "$line" >>"$tmp/rounds"
	echo "$line" | awk -v r="$r" -v o="$order" -v la="$la" '{printf "round %d (%s, load %s): bare %s req/s (%s µs CPU/req), idem %s req/s (%s µs CPU/req), ratio %s, CPU ratio %s\n", r, o, la, $1, $2, $3, $4, $5, $6}'
done
col() { cut -d' ' -f"$1" "$tmp/rounds"; }
spread() { echo "$(col "$1" | median) (rounds $(col "$1" | sort -g | head -1)–$(col "$1" | sort -g | tail -1))"; }
echo "median ratio $(spread 5); median bare $(col 1 | median) req/s, idem $(col 3 | median) req/s"
echo "median CPU ratio (bare's CPU/req ÷ idem's) $(spread 6); median CPU/req bare $(col 2 | median) µs, idem $(col 4 | median) µs"
echo "load average: $(loadavg)"
