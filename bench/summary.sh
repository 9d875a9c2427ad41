#!/usr/bin/env bash
# Prints the median of each benchmark's figures from `go test -bench` output
# (default results.txt), and checks them against issue 7's targets: each
# ratio is against the faster peer, or the bare echo, of the same run.
set -euo pipefail
exec awk '
function median(key,   n, i, j, t, a) {
	n = split(vals[key], a, " ")
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function med(name, unit) { return ((name SUBSEP unit) in vals) ? median(name SUBSEP unit) : "" }
function verdict(ok) { return ok ? "met" : "MISSED" }
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
	if (!(name in seen)) { seen[name] = 1; order[++count] = name }
	for (i = 3; i < NF; i += 2) {
		k = name SUBSEP $(i + 1)
		vals[k] = (k in vals) ? vals[k] " " $i : $i
	}
}
END {
	printf "%-40s %14s %12s %10s %10s %6s %12s\n", "benchmark (medians)", "items/s", "items/batch", "allocs/op", "B/op", "cores", "cpu-ns/item"
	for (i = 1; i <= count; i++) {
		n = order[i]
		if (n !~ /^Core\//) continue
		printf "%-40s %14.0f %12.1f %10s %10s %6.2f %12.0f\n", n, med(n, "items/s"), med(n, "items/batch"), med(n, "allocs/op"), med(n, "B/op"), med(n, "cores"), med(n, "cpu-ns/item")
	}
	print ""
	split("1 8 64 512", ps, " ")
	for (i = 1; i <= 4; i++) {
		p = ps[i]
		b = med("Core/batcher/producers=" p, "items/s")
		f = med("Core/batcher-full/producers=" p, "items/s")
		g = med("Core/dataloadgen/producers=" p, "items/s")
		d = med("Core/dataloader/producers=" p, "items/s")
		if (b == "" || g == "" || d == "") continue
		peer = g > d ? g : d
		line = sprintf("core producers=%-4s batcher/faster peer = %.2fx", p, b / peer)
		if (f != "") line = line sprintf(" (full batches only: %.2fx)", f / peer)
		if (p == 64) line = line sprintf("   target >= 6x: %s", verdict(b / peer >= 6))
		if (p == 512) line = line sprintf("   target >= 1.0x: %s", verdict(b / peer >= 1.0))
		print line
	}
	for (i = 1; i <= 4; i++) {
		a = med("Core/batcher/producers=" ps[i], "allocs/op")
		if (a == "") continue
		line = sprintf("core producers=%-4s allocs per item = %s", ps[i], a)
		if (ps[i] == 8 || ps[i] == 64) line = line sprintf("   target <= 2: %s", verdict(a <= 2))
		print line
	}
	for (i = 1; i <= count; i++) {
		n = order[i]
		if (n ~ /^GRPCUnary\//) {
			r = med(n, "ratio")
			printf "%-28s batcher %.0f req/s, echo %.0f req/s, ratio %.3f   target >= 0.8 (batcherd): %s\n", n, med(n, "batcher-req/s"), med(n, "echo-req/s"), r, verdict(r >= 0.8)
			printf "%-28s shaped echo %.0f req/s: ceiling %.3f, batcher/shaped %.3f\n", "", med(n, "shaped-req/s"), med(n, "ceiling"), med(n, "vs-shaped")
		}
		if (n ~ /^GRPCStream\//) {
			r = med(n, "ratio")
			printf "%-28s batcher %.0f msg/s, echo %.0f msg/s, ratio %.3f   target >= 0.7 (batcherd): %s\n", n, med(n, "batcher-msg/s"), med(n, "echo-msg/s"), r, verdict(r >= 0.7)
			printf "%-28s shaped echo %.0f msg/s: ceiling %.3f, batcher/shaped %.3f\n", "", med(n, "shaped-msg/s"), med(n, "ceiling"), med(n, "vs-shaped")
		}
		if (n ~ /^GRPCLayer\//) {
			printf "%-28s with the layer %.0f/s, without %.0f/s, ratio %.3f\n", n, med(n, "with"), med(n, "without"), med(n, "ratio")
		}
		if (n == "GRPCUnaryPool") {
			printf "%-28s pooled %.0f req/s, unpooled %.0f req/s, ratio %.3f\n", n, med(n, "pooled-req/s"), med(n, "unpooled-req/s"), med(n, "ratio")
		}
		if (n == "GRPCStreamBudget") {
			printf "%-28s default budget %.0f msg/s, sized to the load %.0f msg/s, ratio %.3f\n", n, med(n, "default-msg/s"), med(n, "sized-msg/s"), med(n, "ratio")
		}
		if (n == "QueuedMemory") {
			m = med(n, "B/queued-req")
			printf "queued request heap beyond prompt = %.0f B   target < 1024: %s\n", m, verdict(m < 1024)
		}
	}
}' "${1:-results.txt}"
