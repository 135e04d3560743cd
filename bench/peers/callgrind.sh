#!/bin/sh
# Instructions per request of every system in BenchmarkPeers, under
# valgrind --tool=callgrind, divided by the bare handler's (net/http
# systems by the net/http bare handler, fiber by fiber's own).
#
# Per request = (instructions at $HI requests − at $LO) / ($HI − $LO),
# which removes start-up. The garbage collector runs as usual (GOGC
# default, one P): its share of the work is part of each system's cost.
# asyncpreemptoff: callgrind cannot take Go's preemption signals;
# gcshrinkstackoff: stack shrinking would make runs differ;
# cpu.rdtscp=off: Go's runtime reads the clock with RDTSCP where the CPU
# has it, and valgrind 3.19 cannot execute RDTSCP (the program dies of
# SIGILL at its first clock read under callgrind, after a few million
# instructions); with the feature off the runtime uses RDTSC.
#
# The script fails (exit 1, valgrind's log on stderr) when a run of
# valgrind or of the benchmark fails, when the benchmark did not report
# the number of requests asked for, or when callgrind wrote no total: a
# crashed run's partial count is never read as a result.
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
	log="$tmp/log.$$"
	if ! GODEBUG=asyncpreemptoff=1,gcshrinkstackoff=1,cpu.rdtscp=off GOMAXPROCS=1 valgrind --tool=callgrind \
		--error-exitcode=1 --callgrind-out-file="$tmp/cg" "$tmp/peers.test" -test.run '^$' \
		-test.bench "^BenchmarkPeers\$/^${1%/*}\$/^${1#*/}\$" -test.benchtime "${2}x" >"$log" 2>&1; then
		echo "callgrind.sh: $1 × $2: valgrind or the benchmark failed:" >&2
		tail -20 "$log" >&2
		exit 1
	fi
	# The benchmark line must be there with the requested count: a run
	# that matched no benchmark, or stopped early, is no measurement.
	if ! grep -Eq "^BenchmarkPeers/${1%/*}/${1#*/}(-[0-9]+)?[[:space:]]+$2[[:space:]]" "$log"; then
		echo "callgrind.sh: $1 × $2: no benchmark line for $2 requests:" >&2
		tail -20 "$log" >&2
		exit 1
	fi
	total=$(sed -n 's/^summary: //p' "$tmp/cg")
	case $total in
	'' | *[!0-9]*) echo "callgrind.sh: $1 × $2: callgrind wrote no total ($total)" >&2; exit 1 ;;
	esac
	rm -f "$tmp/cg"
	echo "$total"
}
printf '%-20s %12s %8s\n' case instr/req '× bare'
for c in $CASES; do
	a=$(count "$c" "$LO") || exit 1
	b=$(count "$c" "$HI") || exit 1
	per=$(( (b - a) / (HI - LO) ))
	if [ "$per" -le 0 ]; then
		echo "callgrind.sh: $c: $HI requests counted no more than $LO ($b ≤ $a)" >&2
		exit 1
	fi
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
