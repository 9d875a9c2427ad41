package cache

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/maypok86/otter/v2"
)

// BenchmarkLibraries compares the two cache libraries considered for the
// memory layer on what the response cache does: look up a key and, on a
// miss, store its answer, with keys drawn from a skewed (Zipf) population
// ten times larger than the budget holds, and answers of 100 B to 4 KiB
// weighed in bytes. hit% is the share of lookups that hit; unseen% the
// share of stores that a lookup right after does not see (the core relies
// on seeing them: an identical request that arrives just after an answer
// must find it); ns/op is the cost of one lookup-or-store (and its check)
// with GOMAXPROCS goroutines at once, keys drawn beforehand.
//
//	go test -run '^$' -bench Libraries -benchtime 2000000x -count 3 ./cache
func BenchmarkLibraries(b *testing.B) {
	const keys = 1 << 20
	const budget = keys / 10 * 2048 // a tenth of the population, at the mean size
	weight := func(k uint64) uint32 { return 100 + uint32(k*2654435761%3997) }
	libs := []struct {
		name string
		make func() (get func(uint64) bool, set func(uint64), stop func())
	}{
		{"otter", func() (func(uint64) bool, func(uint64), func()) {
			c := otter.Must(&otter.Options[uint64, uint32]{
				MaximumWeight:    budget,
				Weigher:          func(_ uint64, v uint32) uint32 { return v },
				ExpiryCalculator: otter.ExpiryCreating[uint64, uint32](time.Hour),
			})
			return func(k uint64) bool { _, ok := c.GetIfPresent(k); return ok },
				func(k uint64) { c.Set(k, weight(k)) },
				func() { c.StopAllGoroutines() }
		}},
		{"ristretto", func() (func(uint64) bool, func(uint64), func()) {
			c, err := ristretto.NewCache(&ristretto.Config[uint64, uint32]{
				NumCounters: keys, // its guidance: ten times the entries it holds
				MaxCost:     budget,
				BufferItems: 64,
			})
			if err != nil {
				b.Fatal(err)
			}
			return func(k uint64) bool { _, ok := c.Get(k); return ok },
				func(k uint64) { c.SetWithTTL(k, weight(k), int64(weight(k)), time.Hour) },
				c.Close
		}},
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 7)), 1.01, 1, keys-1)
	draws := make([]uint64, 1<<22)
	for i := range draws {
		draws[i] = z.Uint64()
	}
	for _, lib := range libs {
		b.Run(lib.name, func(b *testing.B) {
			get, set, stop := lib.make()
			defer stop()
			var hits, lookups, sets, unseen atomic.Int64
			var start atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := start.Add(1 << 20)
				var h, n, s, u int64
				for pb.Next() {
					k := draws[i%uint64(len(draws))]
					i++
					n++
					if get(k) {
						h++
						continue
					}
					set(k)
					s++
					if !get(k) {
						u++
					}
				}
				hits.Add(h)
				lookups.Add(n)
				sets.Add(s)
				unseen.Add(u)
			})
			b.ReportMetric(100*float64(hits.Load())/float64(lookups.Load()), "hit%")
			b.ReportMetric(100*float64(unseen.Load())/float64(max(sets.Load(), 1)), "unseen%")
		})
	}
}
