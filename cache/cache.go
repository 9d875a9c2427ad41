package cache

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/batcherhq/batcher/batcher"
)

// Defaults.
const (
	// DefaultMaxBytes is the memory budget shared by the routes without one
	// of their own.
	DefaultMaxBytes = 256 << 20
	// DefaultRedisTimeout bounds one Redis command.
	DefaultRedisTimeout = 100 * time.Millisecond
	// DefaultRedisPrefix starts every key the cache writes in Redis.
	DefaultRedisPrefix = "batcher:cache:"
	// redisPause is how long Redis is left alone after a failure.
	redisPause = time.Second
	// writeQueue is how many Redis writes may wait; past it, writes are
	// dropped (and counted): the answer is still in memory.
	writeQueue = 4096
)

// Option configures a Cache.
type Option func(*config)

type config struct {
	maxBytes     int64
	rdb          redis.UniversalClient
	redisTimeout time.Duration
	prefix       string
	mp           metric.MeterProvider
	clock        func() time.Time
	// otterClock is the memory layer's time source: nil, otter's own (the
	// wall clock) unless a test set the clock (withClock).
	otterClock otter.Clock
}

// WithMaxBytes sets the memory budget of the routes without one of their
// own. Default DefaultMaxBytes; less than 1 fails New.
func WithMaxBytes(n int64) Option { return func(c *config) { c.maxBytes = n } }

// WithRedis puts rdb behind the memory layer, shared by every replica
// that uses the same Redis and prefix. Default none: memory only.
func WithRedis(rdb redis.UniversalClient) Option { return func(c *config) { c.rdb = rdb } }

// WithRedisTimeout bounds one Redis command. Default DefaultRedisTimeout;
// not positive fails New.
func WithRedisTimeout(d time.Duration) Option { return func(c *config) { c.redisTimeout = d } }

// WithRedisPrefix sets the prefix of the cache's Redis keys. Default
// DefaultRedisPrefix; empty fails New.
func WithRedisPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithMeterProvider sets where the cache's metrics go. Default none.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// withClock sets the cache's clock, the memory layer's included: tests
// move time instead of waiting for it. Default time.Now.
func withClock(now func() time.Time) Option {
	return func(c *config) { c.clock, c.otterClock = now, otterClock(now) }
}

// otterClock is an otter.Clock reading now. It gives no ticks: otter then
// does without its periodic clean-up, and an expired entry is found
// expired when it is read.
type otterClock func() time.Time

func (f otterClock) NowNano() int64                    { return f().UnixNano() }
func (otterClock) Tick(time.Duration) <-chan time.Time { return nil }

// Cache is a batcher.Cache: memory, and Redis behind it when configured.
// It is safe for concurrent use. Close stops its goroutines.
type Cache struct {
	cfg   config
	def   *part                            // routes without a budget of their own
	parts atomic.Pointer[map[string]*part] // copy on write under partsMu
	mu    sync.Mutex
	stats sync.Map // route name -> *routeStats
	rd    *remote  // nil: memory only
	m     *metrics
}

// part is one memory budget.
type part struct {
	c   *otter.Cache[localKey, *entry]
	max atomic.Int64
}

type localKey struct {
	tenant string
	id     batcher.Identity
}

// entry is one cached answer.
type entry struct {
	r       *batcher.Result
	st      *routeStats
	expires time.Time
	weight  uint32
}

var _ batcher.Cache = (*Cache)(nil)

// New returns a Cache; a bad option fails it with an error naming it.
func New(opts ...Option) (*Cache, error) {
	cfg := config{maxBytes: DefaultMaxBytes, redisTimeout: DefaultRedisTimeout, prefix: DefaultRedisPrefix, clock: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	var errs []error
	if cfg.maxBytes < 1 {
		errs = append(errs, fmt.Errorf("cache max bytes: must be at least 1, got %d", cfg.maxBytes))
	}
	if cfg.redisTimeout <= 0 {
		errs = append(errs, fmt.Errorf("cache redis timeout: must be positive, got %v", cfg.redisTimeout))
	}
	if cfg.prefix == "" {
		errs = append(errs, errors.New("cache redis prefix: must not be empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c := &Cache{cfg: cfg}
	c.parts.Store(&map[string]*part{})
	var err error
	if c.def, err = c.newPart(cfg.maxBytes); err != nil {
		return nil, err
	}
	if cfg.rdb != nil {
		c.rd = newRemote(c, cfg)
	}
	if c.m, err = newMetrics(cfg.mp, c); err != nil {
		return nil, errors.Join(fmt.Errorf("cache metrics: %w", err), c.Close(context.Background()))
	}
	return c, nil
}

func (c *Cache) newPart(maxBytes int64) (*part, error) {
	p := &part{}
	p.max.Store(maxBytes)
	var err error
	p.c, err = otter.New(&otter.Options[localKey, *entry]{
		MaximumWeight: uint64(maxBytes),
		Clock:         c.cfg.otterClock,
		Weigher:       func(_ localKey, e *entry) uint32 { return e.weight },
		ExpiryCalculator: otter.ExpiryCreatingFunc(func(e otter.Entry[localKey, *entry]) time.Duration {
			return max(e.Value.expires.Sub(c.cfg.clock()), time.Nanosecond)
		}),
		// Under the entry's bucket lock: atomics only.
		OnAtomicDeletion: func(e otter.DeletionEvent[localKey, *entry]) {
			st := e.Value.st
			st.bytes.Add(-int64(e.Value.weight))
			if e.WasEvicted() {
				st.evictions.Add(1)
			}
		},
	})
	return p, err
}

// partFor returns the memory budget of k's route.
func (c *Cache) partFor(k *batcher.CacheKey) *part {
	if k.MaxBytes == 0 {
		return c.def
	}
	if p := (*c.parts.Load())[k.Route]; p != nil {
		if p.max.Load() != k.MaxBytes { // the route's budget was reloaded
			c.mu.Lock()
			if p.max.Swap(k.MaxBytes) != k.MaxBytes {
				p.c.SetMaximum(uint64(k.MaxBytes))
			}
			c.mu.Unlock()
		}
		return p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.parts.Load()
	if p := old[k.Route]; p != nil {
		return p
	}
	p, err := c.newPart(k.MaxBytes)
	if err != nil { // cannot happen: the options are fixed and valid
		return c.def
	}
	next := make(map[string]*part, len(old)+1)
	for r, q := range old {
		next[r] = q
	}
	next[k.Route] = p
	c.parts.Store(&next)
	return p
}

// statsFor returns the counts of route.
func (c *Cache) statsFor(route string) *routeStats {
	if s, ok := c.stats.Load(route); ok {
		return s.(*routeStats)
	}
	s, _ := c.stats.LoadOrStore(route, &routeStats{route: route})
	return s.(*routeStats)
}

// Get looks k up in memory.
func (c *Cache) Get(k *batcher.CacheKey) (*batcher.Result, bool) {
	st := c.statsFor(k.Route)
	e, ok := c.partFor(k).c.GetIfPresent(localKey{k.Tenant, k.ID})
	if !ok {
		st.misses[layerLocal].Add(1)
		return nil, false
	}
	st.hits[layerLocal].Add(1)
	return e.r, true
}

// Again is Get for a request that already missed: only a hit counts.
func (c *Cache) Again(k *batcher.CacheKey) (*batcher.Result, bool) {
	e, ok := c.partFor(k).c.GetIfPresent(localKey{k.Tenant, k.ID})
	if !ok {
		return nil, false
	}
	c.statsFor(k.Route).hits[layerLocal].Add(1)
	return e.r, true
}

// Remote reports whether Redis is configured.
func (c *Cache) Remote() bool { return c.rd != nil }

// Fetch looks k up in Redis, keeps a hit in memory for the rest of its
// TTL, and reports any failure as a miss.
func (c *Cache) Fetch(ctx context.Context, k *batcher.CacheKey) (*batcher.Result, bool) {
	if c.rd == nil {
		return nil, false
	}
	st := c.statsFor(k.Route)
	r, expires, ok := c.rd.get(ctx, k, st)
	if !ok {
		st.misses[layerRedis].Add(1)
		return nil, false
	}
	st.hits[layerRedis].Add(1)
	c.setLocal(k, r, expires, st)
	return r, true
}

// Put keeps r in memory for k's TTL and queues its write to Redis.
func (c *Cache) Put(k *batcher.CacheKey, r *batcher.Result) {
	st := c.statsFor(k.Route)
	expires := c.cfg.clock().Add(k.TTL)
	c.setLocal(k, r, expires, st)
	if c.rd != nil {
		c.rd.put(k, r, expires, st)
	}
}

func (c *Cache) setLocal(k *batcher.CacheKey, r *batcher.Result, expires time.Time, st *routeStats) {
	w := entryOverhead + len(k.Tenant) + len(k.Route) + deepSize(reflect.ValueOf(r))
	e := &entry{r: r, st: st, expires: expires, weight: uint32(min(w, 1<<31))}
	st.bytes.Add(int64(e.weight))
	c.partFor(k).c.Set(localKey{k.Tenant, k.ID}, e)
}

// Retain forgets what the cache keeps for the routes that are not in
// routes, the routes in force after a reload: their counts (and so their
// metrics series), their own budgets and the answers in them, and their
// answers in the shared budget. A route in routes that no longer has a
// budget of its own (RouteCache.MaxBytes 0, or the cache off) loses the
// one it had, and its answers with it. A request admitted on a removed
// route before the reload may still store its answer after Retain; it is
// counted again under that route, and ages out.
func (c *Cache) Retain(routes []batcher.Route) {
	live := make(map[string]bool, len(routes))
	own := make(map[string]bool, len(routes))
	for _, r := range routes {
		live[r.Name] = true
		own[r.Name] = !r.Cache.Off && r.Cache.MaxBytes > 0
	}
	c.mu.Lock()
	old := *c.parts.Load()
	next := make(map[string]*part, len(old))
	var dropped []*part
	for r, p := range old {
		if own[r] {
			next[r] = p
		} else {
			dropped = append(dropped, p)
		}
	}
	c.parts.Store(&next)
	c.mu.Unlock()
	for _, p := range dropped {
		p.c.InvalidateAll()
		p.c.StopAllGoroutines()
	}
	gone := make(map[*routeStats]bool)
	c.stats.Range(func(r, s any) bool {
		if !live[r.(string)] {
			c.stats.Delete(r)
			gone[s.(*routeStats)] = true
		}
		return true
	})
	if len(gone) == 0 {
		return
	}
	for k, e := range c.def.c.All() {
		if gone[e.st] {
			c.def.c.Invalidate(k)
		}
	}
}

// Close stops the cache's goroutines, after writing to Redis what is
// queued (until ctx ends).
func (c *Cache) Close(ctx context.Context) error {
	var err error
	if c.rd != nil {
		err = c.rd.close(ctx)
	}
	c.def.c.StopAllGoroutines()
	for _, p := range *c.parts.Load() {
		p.c.StopAllGoroutines()
	}
	if c.m != nil {
		c.m.close()
	}
	return err
}

// RouteStats are one route's cache counts.
type RouteStats struct {
	Route string
	// Hits and Misses by layer: [0] memory, [1] Redis. A request that
	// misses in memory and hits in Redis counts a miss and a hit.
	Hits, Misses [2]int64
	Evictions    int64 // from memory, for size or age
	Bytes        int64 // held in memory
	RedisErrors  int64
}

// HitRatio is the share of lookups answered from either layer.
func (s RouteStats) HitRatio() float64 {
	lookups := s.Hits[layerLocal] + s.Misses[layerLocal]
	if lookups == 0 {
		return 0
	}
	return float64(s.Hits[layerLocal]+s.Hits[layerRedis]) / float64(lookups)
}

// Stats returns every route's counts.
func (c *Cache) Stats() []RouteStats {
	var out []RouteStats
	c.stats.Range(func(_, v any) bool {
		out = append(out, v.(*routeStats).snapshot())
		return true
	})
	return out
}
