#!/bin/sh
# Instructions per request of every system in BenchmarkPeers, under
# valgrind --tool=callgrind, divided by the bare handler's (net/http
# systems by the net/http bare handler, fiber by fiber's own).
#
# Per request = (instructions at $HI requests − at $LO) / ($HI − $LO),
# which removes start-up. The garbage collector runs as usual (GOGC
# default, one P): its share of the work is part of each system's cost.
# asyncpreemptoff: callgrind cannot take Go's preemption signals;
# gcshrinkstackoff: stack shrinking would make runs differ.
#
#   bench/peers/callgrind.sh            # from the repository root or here
#   LO=1000 HI=5000 CASES='idem/first idem/replay' bench/peers/callgrind.sh
set -eu
cd "$(dirname "$0")"
LO=${LO:-1000}
HI=${HI:-5000}
CASES=${CASES:-"bare/first bare/replay idem/first idem/replay fiber-bare/first fiber-bare/replay fiber/first fiber/replay"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/peers.test" .
count() { # case n → instructions of the whole run
	GODEBUG=asyncpreemptoff=1,gcshrinkstackoff=1 GOMAXPROCS=1 valgrind --tool=callgrind \
		--callgrind-out-file="$tmp/cg" "$tmp/peers.test" -test.run '^$' \
		-test.bench "^BenchmarkPeers\$/^${1%/*}\$/^${1#*/}\$" -test.benchtime "${2}x" >/dev/null 2>&1
	sed -n 's/^summary: //p' "$tmp/cg"
}
printf '%-20s %12s %8s\n' case instr/req '× bare'
for c in $CASES; do
	a=$(count "$c" "$LO")
	b=$(count "$c" "$HI")
	per=$(( (b - a) / (HI - LO) ))
	case $c in
	bare/*) base=${base:-$per} ;;
	fiber-bare/*) fbase=${fbase:-$per} ;;
	esac
	case $c in
	fiber*) ref=${fbase:-$per} ;;
	*) ref=${base:-$per} ;;
	esac
	printf '%-20s %12d %8s\n' "$c" "$per" "$(echo "scale=2; $per / $ref" | bc)"
done
