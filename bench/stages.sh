#!/usr/bin/env bash
# Splits a CPU profile of BenchmarkCore/batcher into the core's stages and
# prints each stage's CPU per item.
#
#   go test -run '^$' -bench 'Core/batcher/producers=512$' -benchtime 1000000x \
#       -cpuprofile cpu.out -o bench.test .
#   ./stages.sh bench.test cpu.out 1000000
#
# A stage is the CPU of the samples whose stack holds one of its functions
# (and none of the excluded ones); "other" is what is left: the scheduler,
# GC and the benchmark's own producers.
set -euo pipefail
bin=$1 prof=$2 items=$3
total() { # pprof's "Showing nodes accounting for X" line, in seconds
	go tool pprof -top "$@" "$bin" "$prof" 2>/dev/null |
		awk '/^Showing nodes accounting for/ { v=$5; sub(/,$/, "", v); if (v ~ /ms$/) { sub(/ms$/,"",v); v/=1000 } else sub(/s$/,"",v); print v; exit }'
}
all=$(go tool pprof -top "$bin" "$prof" 2>/dev/null | awk '/Total samples/ { v=$NF; sub(/\)$/,"",v); for (i=1;i<=NF;i++) if ($i=="=") { v=$(i+1) } ; if (v ~ /ms$/) { sub(/ms$/,"",v); v/=1000 } else sub(/s$/,"",v); print v; exit }')
declare -A focus=(
	[admission]='batcher\.\(\*Batcher\)\.(Submit|submit)$'
	[lane]='batcher\.\(\*lane\)\.(push|loop|nudge|forget)$|batcher\.\(\*Batcher\)\.laneFor$'
	[grant]='batcher\.\(\*backendState\)\.(ask|grantLocked|release|settle|giveBack|takeLocked|checkLocked|onSuccess|onRateLimited|observeLocked|drop|acquire|extend|tryLocked)$|batcher\.\(\*lane\)\.(grant|give)$'
	[cut]='batcher\.\(\*lane\)\.(cutLocked|planLocked|orderLocked|bestLocked|earliestDueLocked|cut|plan|best)$'
	[dispatch]='batcher\.\(\*batchRun\)|batcher\.\(\*lane\)\.startLocked$|batcher\.\(\*deadlineWatch\)|batcher\.\(\*backendState\)\.worker$|batcher\.dispatch$'
	[delivery]='batcher\.\(\*Call\)\.(finish(As)?|decide|ended)$|batcher\.\(\*Batcher\)\.Do$'
)
declare -A ignore=(
	[admission]='batcher\.\(\*lane\)\.push$|batcher\.\(\*Batcher\)\.laneFor$'
	[lane]='batcher\.\(\*lane\)\.(cutLocked|planLocked|orderLocked|bestLocked|earliestDueLocked|cut|plan|best|startLocked)$|batcher\.\(\*backendState\)|batcher\.\(\*Call\)\.(finish(As)?|ended)$|batcher\.\(\*batchRun\)'
	[grant]='^$'
	[cut]='^$'
	[dispatch]='batcher\.\(\*Call\)\.(finish(As)?|decide|ended)$|batcher\.\(\*backendState\)\.(release|giveBack|onSuccess|onRateLimited)$'
	[delivery]='batcher\.\(\*Batcher\)\.(Submit|submit)$'
)
printf "%-10s %10s %8s\n" stage "ns/item" share
sum=0
for s in admission lane grant cut dispatch delivery; do
	t=$(total -focus "${focus[$s]}" -ignore "${ignore[$s]}")
	t=${t:-0}
	sum=$(awk -v a="$sum" -v b="$t" 'BEGIN{print a+b}')
	awk -v s="$s" -v t="$t" -v n="$items" -v all="$all" 'BEGIN{printf "%-10s %10.0f %7.1f%%\n", s, t*1e9/n, 100*t/all}'
done
awk -v t="$all" -v sum="$sum" -v n="$items" 'BEGIN{printf "%-10s %10.0f %7.1f%%\n%-10s %10.0f\n", "other", (t-sum)*1e9/n, 100*(t-sum)/t, "total", t*1e9/n}'
