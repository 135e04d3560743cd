#!/bin/sh
# CPU per request of `idem proxy --store memory:` against a plain
# httputil.ReverseProxy (./rproxy), both in front of the same upstream
# (cmd/idem/internal/httpbench/upstream), over loopback HTTP: utime+stime
# of each proxy process (from /proc) over $N requests a round, $C
# keep-alive clients (cmd/idem/internal/httpbench/load, a process of its
# own), $R rounds whose order alternates (idem first in odd rounds).
# First requests carry a new key each; replays carry one key, stored
# before the first round (the ReverseProxy forwards them all). Every
# answer must be 2xx, and no replay round may reach the upstream (its
# charge count is checked around each one).
#
# With FLOOR=1 (the default) the replay rounds also load a bare net/http
# server (cmd/idem/internal/httpbench/serve, its handler without any
# proxy or middleware) with the same requests: the floor any replay
# through net/http pays, as a ratio to the ReverseProxy's CPU.
#
# Prints each round's figures and ratio, then per mode the median of the
# rounds' ratios, their spread, the ratio of the totals, and the load
# average around each mode. The binaries are built first, under nice.
#
# With RESTART=1 both proxies are restarted (and warmed) before every
# first-request round, so that each round starts from an empty memory
# store; by default they keep running, and the memory store grows by N
# records a round (its garbage collector's marking grows with it).
#
# The script fails (exit 1, with the reason on stderr) when a tool fails:
# a server that does not start or dies during a round, a load run with a
# non-2xx answer or a non-zero exit, an unreadable charge count, or a
# round in which a proxy used no measurable CPU.
#
#   bench/peers/proxycpu.sh                 # N=20000 C=32 R=7 MODES='unique same' FLOOR=1 RESTART=0
#   IDEM_BIN=/path/to/idem bench/peers/proxycpu.sh   # another build of idem
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
N=${N:-20000}
C=${C:-32}
R=${R:-7}
PORT=${PORT:-19100}
MODES=${MODES:-unique same}
FLOOR=${FLOOR:-1}
RESTART=${RESTART:-0}
tmp=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
hb=./cmd/idem/internal/httpbench
# IDEM_BIN: measure that idem binary instead of building this tree's.
if [ -n "${IDEM_BIN:-}" ]; then cp "$IDEM_BIN" "$tmp/idem"; else (cd "$root" && nice -n 10 go build -o "$tmp/idem" ./cmd/idem); fi
(cd "$root" && nice -n 10 go build -o "$tmp/upstream" $hb/upstream &&
	nice -n 10 go build -o "$tmp/load" $hb/load && nice -n 10 go build -o "$tmp/serve" $hb/serve)
(cd "$root/bench/peers" && nice -n 10 go build -o "$tmp/rproxy" ./rproxy)
up=127.0.0.1:$PORT
"$tmp/upstream" -listen "$up" >/dev/null 2>&1 & pids="$pids $!"
start_idem() {
	"$tmp/idem" proxy --listen 127.0.0.1:$((PORT + 1)) --upstream "http://$up" --store memory: --log-level error >"$tmp/idem.log" 2>&1 &
	idem=$!; pids="$pids $idem"
}
start_rp() {
	"$tmp/rproxy" -listen 127.0.0.1:$((PORT + 2)) -upstream "http://$up" >"$tmp/rproxy.log" 2>&1 &
	rp=$!; pids="$pids $rp"
}
# stop PID: ends one server this script started, and waits for it.
stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}
# wait_port PORT: until something answers (any HTTP status), at most 10 s.
wait_port() {
	i=0
	until curl -s -o /dev/null "http://127.0.0.1:$1/"; do
		i=$((i + 1))
		if [ "$i" -ge 50 ]; then echo "proxycpu: nothing answers on port $1" >&2; exit 1; fi
		sleep 0.2
	done
}
# alive PID NAME: fails when the server is gone.
alive() {
	kill -0 "$1" 2>/dev/null || { echo "proxycpu: $2 (pid $1) died; its log:" >&2; tail -20 "$tmp/$2.log" >&2 2>/dev/null; exit 1; }
}
start_idem
start_rp
"$tmp/serve" -bare 127.0.0.1:$((PORT + 3)) -idem 127.0.0.1:$((PORT + 4)) >/dev/null 2>&1 &
bare=$!; pids="$pids $bare"
# Wait until every server answers (any HTTP status), at most 10 s each.
for port in $PORT $((PORT + 1)) $((PORT + 2)) $((PORT + 3)); do
	i=0
	until curl -s -o /dev/null "http://127.0.0.1:$port/"; do
		i=$((i + 1))
		if [ "$i" -ge 50 ]; then echo "proxycpu: nothing answers on port $port" >&2; exit 1; fi
		sleep 0.2
	done
done
sleep 0.5
for p in $pids; do
	kill -0 "$p" 2>/dev/null || { echo "proxycpu: a server did not start (ports $PORT-$((PORT + 4)) in use? set PORT)" >&2; exit 1; }
done
ticks() {
	t=$(awk '{print $14 + $15}' "/proc/$1/stat") || { echo "proxycpu: cannot read /proc/$1/stat (the server died?)" >&2; exit 1; }
	echo "$t"
}
charges() {
	v=$(curl -fsS "http://$up/stats") || { echo "proxycpu: the upstream's /stats failed" >&2; exit 1; }
	v=$(echo "$v" | tr -dc 0-9)
	[ -n "$v" ] || { echo "proxycpu: the upstream's /stats has no count" >&2; exit 1; }
	echo "$v"
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
hz=$(getconf CLK_TCK)
prefix=cpu-$$-
# load URL KEYS PREFIX N CONNS: fails unless every answer was 2xx.
load() {
	out=$("$tmp/load" -url "$1" -keys "$2" -prefix "$3" -n "$4" -c "$5") || { echo "proxycpu: the load tool failed on $1: $out" >&2; exit 1; }
	case $out in
	*"(0 non-2xx)"*) ;;
	*) echo "proxycpu: $1 keys $2: $out" >&2; exit 1 ;;
	esac
}
# Warm both proxies' connections; store the replayed key.
for side in idem rp bare; do
	case $side in idem) p=$((PORT + 1)) ;; rp) p=$((PORT + 2)) ;; bare) p=$((PORT + 3)) ;; esac
	load "http://127.0.0.1:$p/charges" unique "${prefix}warm-$side-" 2000 "$C"
	load "http://127.0.0.1:$p/charges" same "${prefix}same-$side-" 1 1
done
# median: the middle value (mean of the two middle ones) of stdin's numbers.
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# spread "R1 R2 …": "MEDIAN (rounds MIN–MAX)".
spread() {
	v=$(echo "$1" | tr ' ' '\n' | grep .)
	echo "$(echo "$v" | median) (rounds $(echo "$v" | sort -g | head -1)–$(echo "$v" | sort -g | tail -1))"
}
us() { awk -v t="$1" -v hz="$hz" -v n="$2" 'BEGIN {printf "%.1f", t * 1000000 / hz / n}'; }
for mode in $MODES; do
	case $mode in unique) what=first ;; same) what=replay ;; *) echo "proxycpu: mode $mode: want unique or same" >&2; exit 2 ;; esac
	sides="idem rp"
	if [ "$mode" = same ] && [ "$FLOOR" = 1 ]; then sides="idem rp bare"; fi
	rsides=$(echo "$sides" | awk '{for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "")}')
	echo "$what: load average $(loadavg)"
	t_idem=0; t_rp=0; t_bare=0; ratios=""; floors=""
	for r in $(seq 1 "$R"); do
		if [ $((r % 2)) -eq 1 ]; then order=$sides; else order=$rsides; fi
		kp=${prefix}same-
		if [ "$mode" = unique ]; then kp=$prefix$r-; fi
		if [ "$mode" = unique ] && [ "$RESTART" = 1 ]; then
			stop "$idem"; stop "$rp"
			start_idem; start_rp
			wait_port $((PORT + 1)); wait_port $((PORT + 2))
			load "http://127.0.0.1:$((PORT + 1))/charges" unique "${prefix}warm-idem-$r-" 2000 "$C"
			load "http://127.0.0.1:$((PORT + 2))/charges" unique "${prefix}warm-rp-$r-" 2000 "$C"
		fi
		for side in $order; do
			case $side in
			idem) pid=$idem; port=$((PORT + 1)) ;;
			rp) pid=$rp; port=$((PORT + 2)) ;;
			bare) pid=$bare; port=$((PORT + 3)) ;;
			esac
			c0=$(charges)
			a=$(ticks "$pid")
			load "http://127.0.0.1:$port/charges" "$mode" "$kp$side-" "$N" "$C"
			b=$(ticks "$pid")
			c1=$(charges)
			if [ $((b - a)) -le 0 ]; then
				echo "proxycpu: $side used no measurable CPU over $N requests (round $r)" >&2
				exit 1
			fi
			if [ "$side" = idem ] && [ "$mode" = same ] && [ "$c1" -ne "$c0" ]; then
				echo "proxycpu: $((c1 - c0)) replays reached the upstream" >&2
				exit 1
			fi
			eval "d_$side=$((b - a)); t_$side=\$((t_$side + b - a))"
		done
		alive "$idem" idem; alive "$rp" rproxy
		ratio=$(awk -v i="$d_idem" -v r="$d_rp" 'BEGIN {printf "%.3f", i / r}')
		ratios="$ratios $ratio"
		line="  round $r ($order): idem $(us "$d_idem" "$N") µs CPU/req, ReverseProxy $(us "$d_rp" "$N") µs CPU/req, ratio $ratio"
		case $sides in *bare*)
			floor=$(awk -v f="$d_bare" -v r="$d_rp" 'BEGIN {printf "%.3f", f / r}')
			floors="$floors $floor"
			line="$line; bare server $(us "$d_bare" "$N") µs CPU/req, $floor"
			;;
		esac
		echo "$line"
	done
	echo "$what: idem $(us "$t_idem" $((N * R))) µs/req, ReverseProxy $(us "$t_rp" $((N * R))) µs/req;" \
		"median of rounds $(spread "$ratios"), ratio of totals $(awk -v i="$t_idem" -v r="$t_rp" 'BEGIN {printf "%.3f", i / r}'); load average $(loadavg)"
	if [ -n "$floors" ]; then
		echo "$what floor: a bare net/http server answering the same requests: $(us "$t_bare" $((N * R))) µs/req, median of rounds $(spread "$floors") of ReverseProxy's"
	fi
done
