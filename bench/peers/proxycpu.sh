#!/bin/sh
# CPU per request of `idem proxy --store memory:` against a plain
# httputil.ReverseProxy (./rproxy), both in front of the same upstream
# (bench/http/upstream), over loopback HTTP: utime+stime of each proxy
# process (from /proc) over $N requests a round, $C keep-alive clients
# (bench/http/load, a process of its own), $R rounds whose order rotates.
# First requests carry a new key each; replays carry one key, stored
# before the first round (the ReverseProxy forwards them all).
#
#   bench/peers/proxycpu.sh                 # N=20000 C=32 R=5
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
N=${N:-20000}
C=${C:-32}
R=${R:-5}
PORT=${PORT:-19100}
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
(cd "$root" && go build -o "$tmp/idem" ./cmd/idem && go build -o "$tmp/upstream" ./bench/http/upstream &&
	go build -o "$tmp/load" ./bench/http/load)
(cd "$root/bench/peers" && go build -o "$tmp/rproxy" ./rproxy)
up=127.0.0.1:$PORT
"$tmp/upstream" -listen "$up" >/dev/null 2>&1 & pids="$pids $!"
"$tmp/idem" proxy --listen 127.0.0.1:$((PORT + 1)) --upstream "http://$up" --store memory: --log-level error >/dev/null 2>&1 &
idem=$!; pids="$pids $idem"
"$tmp/rproxy" -listen 127.0.0.1:$((PORT + 2)) -upstream "http://$up" >/dev/null 2>&1 &
rp=$!; pids="$pids $rp"
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
prefix=cpu-$$-
# Warm both proxies' connections; store the replayed key.
for p in $((PORT + 1)) $((PORT + 2)); do
	"$tmp/load" -url "http://127.0.0.1:$p/charges" -c "$C" -n 2000 -keys unique >/dev/null
	"$tmp/load" -url "http://127.0.0.1:$p/charges" -c 1 -n 1 -keys same -prefix "$prefix" >/dev/null
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in unique same; do
	ti=0; tr=0
	for r in $(seq 1 "$R"); do
		if [ $((r % 2)) -eq 1 ]; then order="idem rp"; else order="rp idem"; fi
		for side in $order; do
			if [ "$side" = idem ]; then pid=$idem; port=$((PORT + 1)); else pid=$rp; port=$((PORT + 2)); fi
			a=$(ticks "$pid")
			"$tmp/load" -url "http://127.0.0.1:$port/charges" -c "$C" -n "$N" -keys "$mode" -prefix "$prefix$mode$r" >/dev/null
			b=$(ticks "$pid")
			d=$((b - a))
			if [ "$side" = idem ]; then ti=$((ti + d)); else tr=$((tr + d)); fi
			echo "  $mode round $r $side: $(echo "scale=1; $d * 1000000 / $hz / $N" | bc) µs CPU/req"
		done
	done
	case $mode in unique) what=first ;; *) what=replay ;; esac
	echo "$what: idem $(echo "scale=1; $ti * 1000000 / $hz / $N / $R" | bc) µs/req, ReverseProxy $(echo "scale=1; $tr * 1000000 / $hz / $N / $R" | bc) µs/req, ratio $(echo "scale=3; $ti / $tr" | bc)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
