// Package cache is Batcher's exact response cache: it implements
// batcher.Cache in memory, and over Redis when a fleet shares one.
//
// The memory layer is an otter (github.com/maypok86/otter/v2) cache per
// budget, weighed in bytes: one shared by every route without a budget of
// its own (WithMaxBytes), and one per route with RouteCache.MaxBytes. An
// entry weighs what it holds (its key, the answer's strings and slices, and
// the bookkeeping around it), so the budget bounds the memory the cache
// holds. Otter was chosen over ristretto by BenchmarkLibraries: on a
// skewed workload larger than the budget it keeps more hits, and it never
// drops a write, where ristretto's admission drops writes under contention
// (a Put a Get then misses); see docs/cache.md.
//
// With WithRedis the memory layer is a front for Redis: a memory miss
// looks in Redis (one GET, off the admission path), a Redis hit is kept in
// memory for the rest of its TTL, and every stored answer is written to
// Redis in the background, pipelined. Redis never fails a request: a
// command that fails or times out is a miss, and Redis is left alone for a
// second before the next try, so that a dead Redis costs no timeouts.
//
// Keys are a route, a tenant (empty on a shared route) and the request's
// batcher.Identity, the SHA-256 of everything that changes the answer:
// one tenant never reads another's answers unless the route says so.
//
// Metrics (WithMeterProvider): hits, misses, evictions, bytes and Redis
// errors, by route and layer (local, redis).
package cache
