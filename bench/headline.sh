#!/usr/bin/env bash
# Runs the headline benchmarks into bench/results/ and regenerates the table
# at the top of BENCHMARKS.md (bench/cmd/headline, rows in headline.tsv).
#
#   bench/headline.sh               # every family below, then the table
#   bench/headline.sh core plain    # some families, then the table
#   bench/headline.sh table         # only the table, from the files there
#
# Families (each writes results/<family>.txt, raw `go test -bench` output):
#   core    BenchmarkCore, the gRPC unary and stream rows and the memory per
#           queued request: ROUNDS interleaved rounds (default 5), each
#           running every benchmark once; then bench/doc.sh renders
#           BENCHMARKS.md's core and gRPC tables from the same file
#   plain   issue 27's plain path: this tree against BASE (default 2b48a9c,
#           before the chat surface), binaries alternated 2*ROUNDS times
#   stream  issue 28: BenchmarkStreamTTFT (a burst), the same with llmsim in
#           a process of its own (BenchmarkStreamTTFTSimApart), with the load
#           client in one (BenchmarkStreamTTFTClientApart), with both
#           (BenchmarkStreamTTFTApart: three processes, as in production),
#           and BenchmarkStreamSteady (a steady load), 6 iterations a round,
#           and BenchmarkStream2000 and BenchmarkStream2000ClientApart (the
#           memory figures with the load client in this process and apart)
#   batchapi  issue 31: the 100k-item job through the batch API on SQLite
#           and PostgreSQL, the 1M-item job's RSS and cost, and kill -9 at
#           nine points (test logs: about 10 minutes; needs PostgreSQL)
# Run it on a quiet machine: the figures are medians, but a busy machine
# moves them.
set -euo pipefail
cd "$(dirname "$0")"
ROUNDS=${ROUNDS:-5}
BASE=${BASE:-2b48a9c}
T=${HEADLINE_TMP:-/tmp/headline} # prefix of the binaries it builds: set it when two run at once
mkdir -p results
run() { "$@" -test.run '^$' -test.benchmem -test.timeout 60m; }

core() {
	go test -c -o $T-bench.test .
	: >results/core.txt
	for i in $(seq "$ROUNDS"); do
		echo "headline: core round $i of $ROUNDS" >&2
		run $T-bench.test -test.bench 'Core$|GRPCUnary$|GRPCStream$|QueuedMemory$' | tee -a results/core.txt
	done
	./doc.sh results/core.txt # the core and gRPC tables below the headline, from the same run
}

plain() {
	local base=$T-base
	rm -rf "$base" && git worktree add -f --detach "$base" "$BASE" >/dev/null
	(cd "$base/bench" && go test -c -o $T-plain-base.test .)
	git worktree remove --force "$base"
	go test -c -o $T-plain-head.test .
	: >results/plain-base.txt
	: >results/plain-head.txt
	local sel='Core$/^batcher$/producers=(8|64|512)$|GRPCUnary$/server=batcherd$|GRPCStream$/server=batcherd$'
	# Twice the rounds, 3 s a benchmark, the order flipped each round: at 8
	# and 64 producers items/s is bound by wake-up latency, and one binary's
	# runs spread over 2 to 5 times their lowest.
	local order
	for i in $(seq $((2 * ROUNDS))); do
		echo "headline: plain round $i of $((2 * ROUNDS))" >&2
		order="base head"
		[ $((i % 2)) = 0 ] && order="head base"
		for v in $order; do
			run $T-plain-$v.test -test.bench "$sel" -test.benchtime 3s | tee -a results/plain-$v.txt
		done
	done
}

stream() {
	go test -c -o $T-bench.test .
	: >results/stream.txt
	for i in $(seq "$ROUNDS"); do
		echo "headline: stream round $i of $ROUNDS" >&2
		run $T-bench.test -test.bench 'StreamTTFT$|StreamTTFTSimApart$|StreamTTFTClientApart$|StreamTTFTApart$|StreamSteady$' -test.benchtime 6x | tee -a results/stream.txt
	done
	run $T-bench.test -test.bench 'Stream2000$|Stream2000ClientApart$' -test.benchtime 3x | tee -a results/stream.txt
}

batchapi() {
	(cd .. && BATCHER_REQUIRE_SERVICES=1 BATCHER_BATCHAPI_ITEMS=100000 go test -count=1 -run 'TestEndToEndBatchAPI$' -v -timeout 30m ./cmd/batcherd/) | tee results/batchapi-100k.log
	(cd .. && BATCHER_BATCHAPI_MILLION=1 go test -count=1 -run TestBatchAPIMillionRSS -v -timeout 40m ./cmd/batcherd/) | tee results/batchapi-1m.log
	(cd .. && go test -count=1 -run TestBatchAPIKill9 -v -timeout 30m ./cmd/batcherd/) | tee results/batchapi-kill.log
}

table() { go run ./cmd/headline headline.tsv ../BENCHMARKS.md; }

fams=("$@")
[ ${#fams[@]} -gt 0 ] || fams=(core plain stream)
for f in "${fams[@]}"; do
	case $f in
	core | plain | stream | batchapi) $f ;;
	table) ;;
	*) echo "headline.sh: unknown family $f" >&2 && exit 2 ;;
	esac
done
table
