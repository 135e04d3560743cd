#!/bin/sh
# First requests over loopback HTTP: the same handler bare and behind
# httpidem (memstore), served by one process
# (cmd/idem/internal/httpbench/serve), loaded by wrk
# (cmd/idem/internal/httpbench/wrk/first.lua: a new key per request) in
# $R interleaved rounds (bare, idem, then idem, bare, …). Prints each
# round's requests/s, its ratio and the load average at its start, then
# the median of the rounds' ratios, their spread, and the median
# requests/s of each side. A non-2xx answer fails the run; socket errors
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
# rate ADDR: wrk's requests/s; fails on a non-2xx answer, warns of
# socket errors (timeouts on a loaded machine).
rate() {
	wrk -t"$T" -c"$C" -d"$D" -s "$SCRIPT" "http://$1/charges" >"$tmp/out"
	if grep -q 'Non-2xx' "$tmp/out"; then
		echo "wrk.sh: $1:" >&2
		cat "$tmp/out" >&2
		exit 1
	fi
	if grep -q 'Socket errors' "$tmp/out"; then
		echo "wrk.sh: $1: $(grep 'Socket errors' "$tmp/out")" >&2
	fi
	awk '/Requests\/sec/ {print $2}' "$tmp/out"
}
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
	ratio=$(awk -v i="$i" -v b="$b" 'BEGIN {printf "%.3f", i / b}')
	echo "$b $i $ratio" >>"$tmp/rounds"
	echo "round $r ($order, load $la): bare $b req/s, idem $i req/s, ratio $ratio"
done
med=$(cut -d' ' -f3 "$tmp/rounds" | median)
lo=$(cut -d' ' -f3 "$tmp/rounds" | sort -g | head -1)
hi=$(cut -d' ' -f3 "$tmp/rounds" | sort -g | tail -1)
echo "median ratio $med (rounds $lo–$hi); median bare $(cut -d' ' -f1 "$tmp/rounds" | median) req/s, idem $(cut -d' ' -f2 "$tmp/rounds" | median) req/s"
echo "load average: $(loadavg)"
