package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkStreamTTFT is issue 28's first two figures: 100 concurrent
// streamed chats straight to llmsim and through batcherd, alternated in
// each iteration. It reports each path's time to first token and per-delta
// delivery (p50, p99, in ms) and what Batcher adds (through minus direct,
// percentile against percentile). Targets: added TTFT p50 <= 2, p99 <= 10;
// added delivery p99 <= 1.
//
// It measures Batcher's Go client as shipped: the load through batcherd
// dials with client.DialOptions (the client's fixed flow-control windows,
// no BDP pings), and the load straight to llmsim is plain net/http.
//
// The load is a burst, the worst case: all n chats start at the same
// instant, and llmsim (one time to first token and one token interval for
// every chat) then flushes every chat's chunk at the same instants, n
// deltas in lockstep each token interval, so each delta queues behind the
// other n-1 on this machine's cores. BenchmarkStreamSteady is the same
// figures under the steadier load production sees.
func BenchmarkStreamTTFT(b *testing.B) {
	// chats=100 is the load; chats=10 the same with less CPU
	// asked of a shared machine.
	for _, n := range []int{100, 10} {
		b.Run(fmt.Sprintf("chats=%d", n), func(b *testing.B) { benchStreamTTFT(b, n, rigOpts{stamp: true}) })
	}
}

// BenchmarkStreamTTFTSimApart is BenchmarkStreamTTFT with llmsim in a
// process of its own, as an upstream is in production (rigOpts.simApart):
// in this process, llmsim reads the requests of a burst through batcherd
// only when the Go runtime next polls the network, which a busy process
// does late, so that its hop-upstream-batcher, and the time to first token
// Batcher adds, include a wait that an upstream elsewhere does not have.
// The two processes share this machine's cores.
func BenchmarkStreamTTFTSimApart(b *testing.B) {
	const n = 100
	b.Run(fmt.Sprintf("chats=%d", n), func(b *testing.B) { benchStreamTTFT(b, n, rigOpts{stamp: true, simApart: true}) })
}

// BenchmarkStreamTTFTClientApart is BenchmarkStreamTTFT with the load
// client, its chats straight to llmsim and those through batcherd, in a
// process of its own, as batcherd's callers are in production
// (rigOpts.clientApart): this process holds batcherd and llmsim, and the
// client's stream starts do not share its runtime. It also reports
// cpu-batcherd-ms/chat, this process's CPU per chat through less direct.
func BenchmarkStreamTTFTClientApart(b *testing.B) {
	const n = 100
	b.Run(fmt.Sprintf("chats=%d", n), func(b *testing.B) { benchStreamTTFT(b, n, rigOpts{stamp: true, clientApart: true}) })
}

// BenchmarkStreamTTFTApart is BenchmarkStreamTTFT as production runs:
// caller, gateway and provider in three processes (the load client and
// llmsim each in one of its own: rigOpts.clientApart and simApart), all
// on this machine's cores. This process holds batcherd alone.
func BenchmarkStreamTTFTApart(b *testing.B) {
	const n = 100
	b.Run(fmt.Sprintf("chats=%d", n), func(b *testing.B) {
		benchStreamTTFT(b, n, rigOpts{stamp: true, simApart: true, clientApart: true})
	})
}

func benchStreamTTFT(b *testing.B, n int, o rigOpts) {
	rig := newStreamRig(b, n, 1, o)
	defer rig.stop()
	ctx := context.Background()
	rig.run(ctx, n, "warm-d", false, nil)
	rig.run(ctx, n, "warm-t", true, nil)
	var dT, tT, dD, tD []time.Duration
	var dHops, tHops hops
	// The CPU time in each side's rounds: of this process and the load
	// client's (rig.cpu), and of this process alone.
	var dCPU, tCPU, dOwn, tOwn time.Duration
	i := 0
	for b.Loop() {
		i++
		c0, o0 := rig.cpu(b)
		rs := rig.run(ctx, n, fmt.Sprint("d", i), false, nil)
		c1, o1 := rig.cpu(b)
		dCPU, dOwn = dCPU+c1-c0, dOwn+o1-o0
		a, d := rig.measure(b, rs)
		dT, dD = append(dT, a...), append(dD, d...)
		dHops.add(rig.hops(rs, false))
		c0, o0 = rig.cpu(b)
		rs = rig.run(ctx, n, fmt.Sprint("t", i), true, nil)
		c1, o1 = rig.cpu(b)
		tCPU, tOwn = tCPU+c1-c0, tOwn+o1-o0
		a, d = rig.measure(b, rs)
		tT, tD = append(tT, a...), append(tD, d...)
		tHops.add(rig.hops(rs, true))
	}
	// Where the added time to first token goes, from a chat's start: to
	// the client's SubmitStreamed returning (the request queued on the
	// connection), to batcherd's handler starting (the HTTP/2 connection
	// both ways, the server's reader, the worker pool), to its request
	// decoded, to the core's dispatch, and to its request reaching llmsim.
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		b.ReportMetric(ms(pct(tHops.sent, p.q)), "hop-sent-batcher-"+p.name+"-ms")
		b.ReportMetric(ms(pct(tHops.handler, p.q)), "hop-handler-batcher-"+p.name+"-ms")
		b.ReportMetric(ms(pct(tHops.decoded, p.q)), "hop-decoded-batcher-"+p.name+"-ms")
		b.ReportMetric(ms(pct(tHops.dispatched, p.q)), "hop-dispatch-batcher-"+p.name+"-ms")
		b.ReportMetric(ms(pct(tHops.arrived, p.q)), "hop-upstream-batcher-"+p.name+"-ms")
		b.ReportMetric(ms(pct(dHops.arrived, p.q)), "hop-upstream-direct-"+p.name+"-ms")
	}
	// CPU per chat, the load client and llmsim included on both sides
	// (llmsim only in this process: not with o.simApart): the difference
	// is what a chat through Batcher costs in CPU, which a burst of n
	// chats starting at once queues behind on this machine's cores. The
	// through side's includes the rig's stamps (a few map inserts).
	chats := float64(i * n)
	b.ReportMetric(ms(dCPU)/chats, "cpu-direct-ms/chat")
	b.ReportMetric(ms(tCPU)/chats, "cpu-batcher-ms/chat")
	b.ReportMetric(ms(tCPU-dCPU)/chats, "cpu-added-ms/chat")
	if o.clientApart {
		// This process's alone, through less direct: batcherd's CPU per
		// chat, on the cores a burst queues on.
		b.ReportMetric(ms(tOwn-dOwn)/chats, "cpu-batcherd-ms/chat")
	}
	reportStream(b, "", dT, tT, dD, tD)
}

// add appends o's samples to h's.
func (h *hops) add(o hops) {
	h.sent = append(h.sent, o.sent...)
	h.handler = append(h.handler, o.handler...)
	h.decoded = append(h.decoded, o.decoded...)
	h.dispatched = append(h.dispatched, o.dispatched...)
	h.arrived = append(h.arrived, o.arrived...)
}

// reportStream reports time to first token and per-delta delivery, direct
// (dT, dD) and through batcherd (tT, tD), p50 and p99, and what Batcher
// adds, under metric names that begin with prefix.
func reportStream(b *testing.B, prefix string, dT, tT, dD, tD []time.Duration) {
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		b.ReportMetric(ms(pct(dT, p.q)), prefix+"ttft-direct-"+p.name+"-ms")
		b.ReportMetric(ms(pct(tT, p.q)), prefix+"ttft-batcher-"+p.name+"-ms")
		b.ReportMetric(ms(pct(tT, p.q)-pct(dT, p.q)), prefix+"ttft-added-"+p.name+"-ms")
		b.ReportMetric(ms(pct(dD, p.q)), prefix+"delta-direct-"+p.name+"-ms")
		b.ReportMetric(ms(pct(tD, p.q)), prefix+"delta-batcher-"+p.name+"-ms")
		b.ReportMetric(ms(pct(tD, p.q)-pct(dD, p.q)), prefix+"delta-added-"+p.name+"-ms")
	}
}

// BenchmarkStreamSteady is BenchmarkStreamTTFT's figures under a steady
// load instead of a burst, with the same llmsim settings: n chats open at
// all times in a closed loop (n clients, each starting a chat as its last
// one ends), the clients' first chats started spread evenly over the first
// token interval, so that the chats' deltas reach Batcher at n different
// instants of each interval rather than in lockstep. Each client runs
// steadyWaves chats and the middle wave's n are measured, as many chats as
// a BenchmarkStreamTTFT iteration measures; the direct side and the side
// through batcherd get exactly the same load, alternated in each
// iteration. Metrics are BenchmarkStreamTTFT's, prefixed "steady-"; the
// CPU per chat counts every wave.
func BenchmarkStreamSteady(b *testing.B) {
	const n = 100
	b.Run(fmt.Sprintf("chats=%d", n), func(b *testing.B) {
		rig := newStreamRig(b, n, 1, rigOpts{})
		defer rig.stop()
		ctx := context.Background()
		rig.run(ctx, n, "warm-d", false, nil)
		rig.run(ctx, n, "warm-t", true, nil)
		var dT, tT, dD, tD []time.Duration
		var cpu [2]time.Duration // the process's CPU time in each side's rounds: direct, through
		i := 0
		for b.Loop() {
			i++
			for side, through := range []bool{false, true} {
				c0 := processCPU(b)
				rs, all := rig.runSteady(ctx, n, fmt.Sprint("steady-", side, "-", i), through)
				cpu[side] += processCPU(b) - c0
				for _, c := range all {
					if c.err != nil {
						b.Fatalf("chat %q: %v", c.key, c.err)
					}
				}
				a, d := rig.measure(b, rs)
				if through {
					tT, tD = append(tT, a...), append(tD, d...)
				} else {
					dT, dD = append(dT, a...), append(dD, d...)
				}
			}
		}
		chats := float64(i * n * steadyWaves)
		b.ReportMetric(ms(cpu[0])/chats, "steady-cpu-direct-ms/chat")
		b.ReportMetric(ms(cpu[1])/chats, "steady-cpu-batcher-ms/chat")
		b.ReportMetric(ms(cpu[1]-cpu[0])/chats, "steady-cpu-added-ms/chat")
		reportStream(b, "steady-", dT, tT, dD, tD)
	})
}

// BenchmarkStream2000 is issue 28's last two figures: 2,000 concurrent
// streamed chats through one batcherd, each checked to end with its whole
// answer; and memory per open streamed request: the live heap (HeapAlloc
// once it settles: settle) with the 2,000 held mid-answer at llmsim, minus
// before, over 2,000.
// That heap counts llmsim's handlers and the load client's streams too, so
// the same is measured for 2,000 chats held straight at llmsim, and
// bytes/stream-batcher is the difference: what batcherd holds (with the
// gRPC client's side of each stream) beyond its upstream connection and
// reader, which the direct caller holds alike (the backend's transport and
// read buffer: newStreamRig, streamRig.direct). Target: at most 16 KiB.
// BenchmarkStream2000ClientApart measures batcherd's process without the
// load client.
func BenchmarkStream2000(b *testing.B) { benchStream2000(b, rigOpts{}) }

// BenchmarkStream2000ClientApart is BenchmarkStream2000 with the load
// client, its chats straight to llmsim and through batcherd alike, in a
// process of its own (rigOpts.clientApart), as batcherd's callers are in
// production: this process holds batcherd and llmsim (behind its tap, which
// holds the answers), so the difference of the two sides is everything
// batcherd holds for an open streamed request, its upstream connection to
// llmsim, that connection's buffers and goroutines and the backend's
// reader included, and nothing of the gRPC client's. llmsim's side of
// each chat (its handler and its connection's buffers) is the same on
// both sides and cancels.
func BenchmarkStream2000ClientApart(b *testing.B) { benchStream2000(b, rigOpts{clientApart: true}) }

func benchStream2000(b *testing.B, o rigOpts) {
	const n = 2000
	rig := newStreamRig(b, n, 4, o)
	defer rig.stop()
	ctx := context.Background()
	held := func(through bool, tag string) (perStream float64, stacks float64) {
		// One chat of the kind first, so that lazily built state is there.
		rig.run(ctx, 1, tag+"-warm", through, nil)
		rig.forget(n + 1)
		var before, during runtime.MemStats
		settle(&before)
		writeProfiles(b, tag+"-before")
		wait, release := rig.tap.holdNext(n)
		var got sync.WaitGroup
		got.Add(n)
		var rs []chatResult
		done := make(chan struct{})
		go func() {
			defer close(done)
			rs = rig.run(ctx, n, tag, through, got.Done)
		}()
		wait()     // every answer stopped after its first chunk
		got.Wait() // and its first delta at the client
		settle(&during)
		writeProfiles(b, tag+"-during")
		release()
		<-done
		rig.measure(b, rs) // every answer whole
		return (float64(during.HeapAlloc) - float64(before.HeapAlloc)) / n,
			(float64(during.StackInuse) - float64(before.StackInuse)) / n
	}
	// One unmeasured round of each first: the first 2,000 of a kind grow
	// what lasts (httptest's connection set, pools, the runtime's own
	// tables), and would count against whichever side ran first.
	held(false, "held-warm-d")
	held(true, "held-warm-t")
	var heapT, heapD, stackT, stackD []float64
	i := 0
	for b.Loop() {
		i++
		h, s := held(false, fmt.Sprint("held-d", i))
		heapD, stackD = append(heapD, h), append(stackD, s)
		h, s = held(true, fmt.Sprint("held-t", i))
		heapT, stackT = append(heapT, h), append(stackT, s)
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(heapT), "bytes/stream-total")
	b.ReportMetric(med(heapD), "bytes/stream-direct")
	b.ReportMetric(med(heapT)-med(heapD), "bytes/stream-batcher")
	b.ReportMetric(med(stackT)-med(stackD), "stack/stream-batcher")
	// The memory an open stream holds beyond a direct one: its heap and
	// its goroutines' stacks (a streamed chat keeps a gRPC handler and a
	// dispatch worker waiting on the upstream). The stacks are of every
	// goroutine, llmsim's and the client's too: the runtime starts each
	// new goroutine with the average stack in use at the last GC, so deep
	// goroutines on Batcher's side (internal/stack says how held workers
	// once were) made every goroutine of the process start larger.
	b.ReportMetric(med(heapT)-med(heapD)+med(stackT)-med(stackD), "mem/stream-batcher")
	b.ReportMetric(n, "chats-whole")
}

// settle collects garbage until the live heap stops shrinking, and reads
// the memory statistics then. One collection is not enough for a
// baseline: what the round before left would count in it and come off
// the next round's figure (sync.Pool's caches, which take two collections
// to empty, and the state of streams whose ends gRPC's and net/http's
// goroutines have yet to process), so that one side's figure would depend
// on which side ran before it.
func settle(m *runtime.MemStats) {
	runtime.GC()
	runtime.ReadMemStats(m)
	for range 20 {
		time.Sleep(20 * time.Millisecond)
		last := m.HeapAlloc
		runtime.GC()
		runtime.ReadMemStats(m)
		if m.HeapAlloc+last/200 >= last { // less than 0.5% freed
			return
		}
	}
}
