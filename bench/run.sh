#!/usr/bin/env bash
# Runs Batcher's benchmarks and summarises them.
#
#   bench/run.sh                 # every benchmark, 6 runs each
#   COUNT=10 BENCH=Core bench/run.sh
#
# Writes bench/results.txt (raw `go test` output, the input benchstat wants),
# then prints benchstat's table and the median of each target's figure.
#
# The runs are interleaved: the test binary runs COUNT times, each time
# every selected benchmark once, rather than once with -count COUNT, which
# runs each benchmark COUNT times in a row. This machine has fast and slow
# spells that last tens of seconds; in a row, one spell could take all six
# runs of one benchmark and none of its peer's (at 8dc475c five of
# Batcher's six runs at 512 producers were fast and all six of its
# full-batches-only runs slow; at a31cbbc the other way round).
# Interleaved, a spell falls on every benchmark of the round alike.
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-6} # benchstat gives a confidence interval from 6 runs
BENCH=${BENCH:-.}
BENCHSTAT=${BENCHSTAT:-golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da}

go test -c -o bench.test .
: >results.txt
for i in $(seq "$COUNT"); do
	echo "run.sh: round $i of $COUNT" >&2
	./bench.test -test.run '^$' -test.bench "$BENCH" -test.benchmem -test.count 1 -test.timeout 30m | tee -a results.txt
done
echo
go run "$BENCHSTAT" results.txt
echo
./summary.sh results.txt
