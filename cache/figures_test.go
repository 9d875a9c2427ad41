package cache

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/fleet/fleettest"
	"github.com/batcherhq/batcher/internal/cputime"
)

// countingBackend answers embeddings at once and counts the requests it
// was sent.
type countingBackend struct{ requests atomic.Int64 }

func (f *countingBackend) Dispatch(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
	f.requests.Add(int64(len(b.Requests)))
	for i, r := range b.Requests {
		out[i].Embedding = []float32{float32(len(r.Input.Text)), 1, 2, 3}
		out[i].Usage = batcher.Usage{PromptTokens: 3}
	}
	return nil
}

// newCore returns a core with an embedding route "embed" on be, and the
// cache c (when not nil) or what opts set.
func newCore(t testing.TB, c *Cache, be batcher.Backend, opts ...batcher.Option) *batcher.Batcher {
	t.Helper()
	if c != nil {
		opts = append(opts, batcher.WithCache(c))
	}
	core, err := batcher.New(append(opts,
		batcher.WithQueueCapacity(10_000),
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: be, MaxConcurrency: 8}),
		batcher.WithRoute(batcher.Route{Name: "embed", Op: batcher.OpEmbedding, Backend: "be",
			Batch: batcher.BatchConfig{MaxBatchSize: 64}}),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	return core
}

// TestFigureRepeatedJob is the figure: an embedding job of 100,000
// items of which half repeat others makes at most 50,001 upstream requests,
// and running it again makes none. Items go in as a job runs them: many at
// once (512 in flight), in a shuffled order, so that repeats meet their
// originals in flight (dedup) as well as after (the cache).
func TestFigureRepeatedJob(t *testing.T) {
	items := 100_000
	if testing.Short() {
		items = 10_000
	}
	texts := make([]string, items)
	for i := range texts {
		texts[i] = fmt.Sprintf("chunk %d", i%(items/2)) // each text twice
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(texts), func(i, j int) { texts[i], texts[j] = texts[j], texts[i] })

	c := newTest(t)
	be := &countingBackend{}
	core := newCore(t, c, be)
	run := func() (cached int64) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 512)
		var n atomic.Int64
		for i, text := range texts {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				res, err := core.Do(context.Background(), &batcher.Request{ID: fmt.Sprint(i), Route: "embed",
					Input: batcher.Input{Op: batcher.OpEmbedding, Text: text}})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Cached {
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return n.Load()
	}
	run()
	first := be.requests.Load()
	t.Logf("first run: %d items, %d upstream requests", items, first)
	if first > int64(items/2)+1 {
		t.Fatalf("first run: %d upstream requests for %d distinct inputs, want at most %d", first, items/2, items/2+1)
	}
	cached := run()
	if second := be.requests.Load() - first; second != 0 || cached != int64(items) {
		t.Fatalf("second run: %d upstream requests and %d of %d hits, want none and all", second, cached, items)
	}
}

// TestFigureMemoryWithinBound: a million distinct answers into a cache
// bounded at 64 MiB leave the heap within 64 MiB of what it held before.
func TestFigureMemoryWithinBound(t *testing.T) {
	keys := 1_000_000
	if testing.Short() {
		keys = 100_000
	}
	const bound = 64 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := newTest(t, WithMaxBytes(bound))
	for i := range keys {
		var id batcher.Identity
		id[0], id[1], id[2], id[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
		// An answer as an embedding route gives: 256 dimensions.
		c.Put(&batcher.CacheKey{Route: "embed", Tenant: "t", ID: id, TTL: 3600e9},
			&batcher.Result{Embedding: make([]float32, 256), Usage: batcher.Usage{PromptTokens: 3}, Backend: "be"})
	}
	c.def.c.CleanUp()
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	st := c.Stats()[0]
	t.Logf("%d puts: heap grew %.1f MiB for a %d MiB bound; the cache counts %.1f MiB in %d entries, %d evicted",
		keys, float64(grew)/(1<<20), bound>>20, float64(st.Bytes)/(1<<20), c.def.c.EstimatedSize(), st.Evictions)
	if grew > bound {
		t.Fatalf("heap grew %d bytes, over the %d bound", grew, bound)
	}
	runtime.KeepAlive(c)
}

// hitRequest is the request BenchmarkHit repeats.
func hitRequest() *batcher.Request {
	return &batcher.Request{Route: "embed", Input: batcher.Input{Op: batcher.OpEmbedding,
		Text: "a paragraph of about two hundred bytes, as a chunk of a document that an embedding pipeline sends again and again to the same model, which the cache answers from memory without the upstream"}}
}

// stubCache answers every lookup at once with one answer, with no table
// behind it: a Do it answers costs the admission path, the request's
// digest and serving the answer, and no lookup.
type stubCache struct{ r *batcher.Result }

func (s stubCache) Get(*batcher.CacheKey) (*batcher.Result, bool)   { return s.r, true }
func (s stubCache) Again(*batcher.CacheKey) (*batcher.Result, bool) { return s.r, true }
func (s stubCache) Fetch(context.Context, *batcher.CacheKey) (*batcher.Result, bool) {
	return nil, false
}
func (stubCache) Remote() bool                           { return false }
func (stubCache) Put(*batcher.CacheKey, *batcher.Result) {}

// BenchmarkHit is a memory hit through the core, Do of an embedding
// answered before, against its baseline in the same binary:
//   - hit: the real cache (otter), admission included;
//   - admission: the same Do answered by stubCache, which does no lookup:
//     the admission path, the request's digest (batcher.Identity) and
//     serving the answer;
//   - digest: SHA-256 of as many bytes as the digest hashes for this
//     request, the part of "admission" that a hit alone pays.
//
// A hit's cost beyond the admission path is hit - admission + digest.
// cpu-ns/op is the process's CPU time per op (internal/cputime), which a
// loaded machine does not inflate as it does ns/op. Run the binary several
// times to alternate the cases:
//
//	go test -c -o /tmp/cache.test ./cache
//	for i in 1 2 3 4 5; do /tmp/cache.test -test.run '^$' -test.bench 'BenchmarkHit' -test.benchtime 200000x; done
func BenchmarkHit(b *testing.B) {
	run := func(b *testing.B, c batcher.Cache) {
		core := newCore(b, nil, &countingBackend{}, batcher.WithCache(c))
		req := hitRequest()
		if _, err := core.Do(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cputime.Process()
		for range b.N {
			res, err := core.Do(context.Background(), req)
			if err != nil || !res.Cached {
				b.Fatalf("%v %v", err, res.Cached)
			}
		}
		b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
	}
	b.Run("hit", func(b *testing.B) { run(b, newTest(b)) })
	b.Run("admission", func(b *testing.B) {
		run(b, stubCache{&batcher.Result{Embedding: []float32{1, 2, 3, 4}, Usage: batcher.Usage{PromptTokens: 3}}})
	})
	b.Run("digest", func(b *testing.B) {
		// The route, the backend model, the operation, the text and the
		// parameters, with their lengths: about the text and 64 bytes.
		in := make([]byte, len(hitRequest().Input.Text)+64)
		b.ReportAllocs()
		cpu := cputime.Process()
		for range b.N {
			_ = sha256.Sum256(in)
		}
		b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
	})
}

// countingHook counts the round trips a go-redis client makes: one per
// command, one per pipeline.
type countingHook struct {
	trips atomic.Int64
	mu    sync.Mutex
	names []string
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.trips.Add(1); return next(ctx, cmds) }
}

// redisReplicas returns two cores, each with its own cache over one Redis:
// a, whose answers are written through at once (its cache closed), and b,
// whose memory layer is cold and whose Redis round trips hook counts.
func redisReplicas(t testing.TB, texts []string) (b *batcher.Batcher, hook *countingHook) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	rdbA, rdbB := fleettest.Client(addr), fleettest.Client(addr)
	t.Cleanup(func() { _ = rdbA.Close(); _ = rdbB.Close() })
	ca, err := New(WithRedis(rdbA), WithRedisPrefix(prefix), WithRedisTimeout(testRedisTimeout))
	if err != nil {
		t.Fatal(err)
	}
	a := newCore(t, ca, &countingBackend{})
	for _, text := range texts {
		if _, err := a.Do(context.Background(), &batcher.Request{Route: "embed", Input: batcher.Input{Op: batcher.OpEmbedding, Text: text}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ca.Close(context.Background()); err != nil { // writes what is queued
		t.Fatal(err)
	}
	// A connection open, so that its handshake (HELLO) is not counted:
	// it is once per connection, not per hit.
	if err := rdbB.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	hook = &countingHook{}
	rdbB.AddHook(hook)
	return newCore(t, newTest(t, WithRedis(rdbB), WithRedisPrefix(prefix), WithRedisTimeout(testRedisTimeout)), &countingBackend{}), hook
}

// TestRedisHitOneRoundTrip: a replica whose memory is cold answers from
// what another stored in Redis with one round trip (a GET), and then from
// memory with none.
func TestRedisHitOneRoundTrip(t *testing.T) {
	b, hook := redisReplicas(t, []string{"stored by a"})
	req := &batcher.Request{Route: "embed", Input: batcher.Input{Op: batcher.OpEmbedding, Text: "stored by a"}}
	res, err := b.Do(context.Background(), req)
	if err != nil || !res.Cached {
		t.Fatalf("b: %v, cached %v", err, res.Cached)
	}
	if n := hook.trips.Load(); n != 1 {
		t.Fatalf("a Redis hit took %d round trips (%v), want 1", n, hook.names)
	}
	if res, err = b.Do(context.Background(), req); err != nil || !res.Cached || hook.trips.Load() != 1 {
		t.Fatalf("the repeat: %v, cached %v, %d round trips in all", err, res.Cached, hook.trips.Load())
	}
}

// BenchmarkRedisHit is a Redis hit through the core of a replica whose
// memory is cold, one request after another: latency (ns/op) and round
// trips per hit.
//
//	go test -run '^$' -bench RedisHit -benchtime 2000x -count 5 ./cache
func BenchmarkRedisHit(b *testing.B) {
	texts := make([]string, b.N)
	for i := range texts {
		texts[i] = fmt.Sprintf("chunk %d of a document stored by another replica", i)
	}
	core, hook := redisReplicas(b, texts)
	b.ReportAllocs()
	b.ResetTimer()
	for _, text := range texts {
		res, err := core.Do(context.Background(), &batcher.Request{Route: "embed", Input: batcher.Input{Op: batcher.OpEmbedding, Text: text}})
		if err != nil || !res.Cached {
			b.Fatalf("%v %v", err, res.Cached)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(hook.trips.Load())/float64(b.N), "round-trips/op")
}
