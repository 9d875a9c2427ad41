#!/usr/bin/env bash
# Runs Batcher's benchmarks and summarises them.
#
#   bench/run.sh                 # every benchmark, 5 runs each
#   COUNT=10 BENCH=Core bench/run.sh
#
# Writes bench/results.txt (raw `go test` output, the input benchstat wants),
# then prints benchstat's table and the median of each target's figure.
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-6} # benchstat gives a confidence interval from 6 runs
BENCH=${BENCH:-.}
BENCHSTAT=${BENCHSTAT:-golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da}

go test -run '^$' -bench "$BENCH" -benchmem -count "$COUNT" -timeout 30m | tee results.txt
echo
go run "$BENCHSTAT" results.txt
echo
./summary.sh results.txt
