#!/usr/bin/env bash
# Cost of the at-most-once mark (Store.MarkStarted) on a first request:
# Begin+Complete against Begin+MarkStarted+Complete, for redisstore (Redis
# alone) and tiered (Redis in front of PostgreSQL; the mark goes to
# PostgreSQL only). Each round runs both sub-benchmarks of BenchmarkMarkCost
# back to back in one process, so every "with" has a "without" next to it
# in time; the table gives medians of each side and of the per-round ratios.
#
#   bench/redisstore/markcost.sh              # COUNT=9 N=3000
#   COUNT=15 N=5000 PKGS=redisstore bench/redisstore/markcost.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
COUNT=${COUNT:-9}
N=${N:-3000}
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

echo "| store | Begin+Complete µs/op | Begin+Mark+Complete µs/op | with / without (median of $COUNT paired rounds) |"
echo "|---|---:|---:|---:|"
for pkg in ${PKGS:-redisstore tiered}; do
	case $pkg in # where each package's benchmarks live
	redisstore) dir=redis/redisstore ;;
	tiered) dir=redis/internal/drivertest/tiered ;;
	*) dir=$pkg ;;
	esac
	go test -c -o "$BIN/$pkg.test" "./$dir/"
	: >"$BIN/$pkg.pairs"
	for _ in $(seq "$COUNT"); do
		"$BIN/$pkg.test" -test.run '^$' -test.bench '^BenchmarkMarkCost$' -test.benchtime "${N}x" |
			awk '/MarkCost\/without/ {w=$3} /MarkCost\/with-/ {m=$3} END {print w, m, m/w}' >>"$BIN/$pkg.pairs"
	done
	w=$(awk '{print $1/1000}' "$BIN/$pkg.pairs" | median)
	m=$(awk '{print $2/1000}' "$BIN/$pkg.pairs" | median)
	r=$(awk '{print $3}' "$BIN/$pkg.pairs" | median)
	printf '| %s | %.1f | %.1f | %.2f |\n' "$pkg" "$w" "$m" "$r"
done
