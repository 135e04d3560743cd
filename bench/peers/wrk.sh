#!/bin/sh
# First requests over loopback HTTP: the same handler bare and behind
# httpidem (memstore), served by one process (bench/http/serve), loaded
# by wrk (bench/http/wrk/first.lua: a new key per request) in $R
# interleaved rounds whose order flips; prints each round's requests/s,
# the ratio, and the load average before and after.
#
#   bench/peers/wrk.sh              # R=4 D=5s, wrk -t2 -c64
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
R=${R:-4}
D=${D:-5s}
SCRIPT=${SCRIPT:-$root/bench/http/wrk/first.lua}
tmp=$(mktemp -d)
pid=""
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/serve" ./bench/http/serve)
"$tmp/serve" -bare 127.0.0.1:18081 -idem 127.0.0.1:18082 >/dev/null 2>&1 &
pid=$!
sleep 1
rate() { wrk -t2 -c64 -d"$D" -s "$SCRIPT" "http://$1/charges" | awk '/Requests\/sec/ {print $2}'; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$R"); do
	if [ $((r % 2)) -eq 1 ]; then
		b=$(rate 127.0.0.1:18081); i=$(rate 127.0.0.1:18082)
	else
		i=$(rate 127.0.0.1:18082); b=$(rate 127.0.0.1:18081)
	fi
	echo "round $r: bare $b req/s, idem $i req/s, ratio $(echo "scale=2; $i / $b" | bc)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
