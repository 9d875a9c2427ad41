package sim_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// BenchmarkDistinctSeeds submits 20,000 chat requests with 20,000 distinct
// seeds and waits for them all: on a native route every seed is a lane of
// its own (an owner goroutine that idles for idle_lane_timeout); on a
// fan-out route (FanOut, each input its own call) the sim shares no
// parameter and they all go through one lane. It reports the lanes and
// goroutines left once every request is answered, and the live heap they
// hold. Run with -benchtime=1x:
//
//	go test -run '^$' -bench DistinctSeeds -benchtime=1x ./backend/sim/
func BenchmarkDistinctSeeds(b *testing.B) {
	for _, fanOut := range []bool{false, true} {
		name := "native"
		if fanOut {
			name = "fan-out"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				distinctSeeds(b, fanOut)
			}
		})
	}
}

func distinctSeeds(b *testing.B, fanOut bool) {
	const n = 20000
	p, err := sim.New(sim.Config{FanOut: fanOut, BaseLatency: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p, MaxConcurrency: 64}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim",
			Batch: batcher.BatchConfig{MaxBatchSize: 32, Window: 2 * time.Millisecond}}),
		batcher.WithMaxLanes(2*n), batcher.WithQueueCapacity(2*n), batcher.WithQueueTimeout(10*time.Minute),
	)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = core.Shutdown(context.Background()) }()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	calls := make([]*batcher.Call, n)
	for i := range calls {
		seed := int64(i)
		c, err := core.Submit(context.Background(), &batcher.Request{ID: strconv.Itoa(i), Route: "chat",
			Input:  batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "hi"}}},
			Params: batcher.Params{Seed: &seed}})
		if err != nil {
			b.Fatal(err)
		}
		calls[i] = c
	}
	for _, c := range calls {
		<-c.Done()
		if err := c.Result().Err; err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	b.ReportMetric(float64(len(core.Lanes())), "lanes")
	b.ReportMetric(float64(runtime.NumGoroutine()-g0), "goroutines")
	b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/(1<<20), "heap-MiB")
}
