package batcher

import (
	"context"
	"strconv"
	"time"
)

// DefaultCacheTTL is how long a route keeps a cached answer unless its
// RouteCache says otherwise.
const DefaultCacheTTL = time.Hour

// MaxCacheTTL bounds RouteCache.TTL.
const MaxCacheTTL = 30 * 24 * time.Hour

// Cache is a response cache: the core looks a cacheable request up before
// it is queued, and stores the answers its cacheable requests get from
// their route's first target. Package cache implements it, in memory and
// over Redis.
//
// Contract: every method is safe for concurrent use. Get looks in memory
// only and never blocks. Fetch looks in a shared layer, when Remote reports
// one, and returns by ctx's end; a failure there is a miss, never an error.
// Put stores in memory at once (a Get after Put returns finds it) and must
// not block on the network. The Results handed to Put and returned by Get
// and Fetch are shared and never written: the core copies them.
type Cache interface {
	Get(k *CacheKey) (*Result, bool)
	// Again is Get for a request that already missed once: a hit counts
	// in the cache's figures, a miss does not count a second time.
	Again(k *CacheKey) (*Result, bool)
	Fetch(ctx context.Context, k *CacheKey) (*Result, bool)
	Remote() bool
	Put(k *CacheKey, r *Result)
}

// CacheKey names one cached answer, with the route settings that govern it.
type CacheKey struct {
	// Route is the route's name: the cache's partition and metrics label.
	Route string
	// Tenant is the request's tenant; empty on a route whose cache is
	// shared between tenants.
	Tenant string
	// ID is the digest of everything else that changes the answer.
	ID Identity
	// TTL is how long the answer is kept.
	TTL time.Duration
	// MaxBytes is the route's own memory budget; 0 shares the cache's.
	MaxBytes int64
}

// RouteCache configures a route's use of the response cache (WithCache).
// The zero value caches embeddings, and chat and completions at
// temperature 0, for DefaultCacheTTL, per tenant.
type RouteCache struct {
	// Off turns the cache off for the route: nothing is looked up or
	// stored, whatever a request asks.
	Off bool
	// TTL is how long an answer is kept. Default DefaultCacheTTL; negative
	// or above MaxCacheTTL fails.
	TTL time.Duration
	// MaxBytes gives the route a memory budget of its own. Default 0: the
	// route shares the cache's; negative fails.
	MaxBytes int64
	// SeedReproducible says the upstream answers a seeded request the same
	// way every time, so that a chat or completion request with a seed is
	// cached at any temperature. Default false: only temperature 0 is.
	SeedReproducible bool
	// Shared lets every tenant read what any tenant stored on this route.
	// Default false: a tenant only ever sees its own answers. Share only
	// a route whose answers reveal nothing about who asked (a public
	// embedding model, say).
	Shared bool
}

// check checks rc's settings, each bad one an error from bad (the route's
// *SettingError).
func (rc *RouteCache) check(bad func(path, format string, args ...any) error) error {
	if rc.TTL < 0 || rc.TTL > MaxCacheTTL {
		return bad("cache.ttl", "must be 0 to %v, got %v", MaxCacheTTL, rc.TTL)
	}
	if rc.MaxBytes < 0 {
		return bad("cache.max_bytes", "must not be negative, got %d", rc.MaxBytes)
	}
	if rc.TTL == 0 {
		rc.TTL = DefaultCacheTTL
	}
	return nil
}

// CacheMode is what a request asks of the response cache.
type CacheMode uint8

// The cache modes.
const (
	// CacheAuto follows the route's rules: embeddings, and chat and
	// completions at temperature 0 (or with a seed where the route says
	// seeds are reproducible), are looked up and stored.
	CacheAuto CacheMode = iota
	// CacheUse looks up and stores the request whatever its parameters.
	CacheUse
	// CacheRefresh skips the lookup and stores the fresh answer.
	CacheRefresh
	// CacheBypass neither looks up nor stores.
	CacheBypass
)

func (m CacheMode) String() string {
	switch m {
	case CacheAuto:
		return "auto"
	case CacheUse:
		return "use"
	case CacheRefresh:
		return "refresh"
	case CacheBypass:
		return "bypass"
	}
	return "cache mode(" + strconv.Itoa(int(m)) + ")"
}

// WithCache sets the response cache. Default none: nothing is cached, at
// the cost of one nil check per request.
func WithCache(c Cache) Option { return func(cfg *config) { cfg.cache = c } }

// cacheWanted reports whether r looks the cache up, and whether it stores
// its answer there, on route rc.
func (b *Batcher) cacheWanted(r *Request, rc *routeConfig) (lookup, store bool) {
	if b.cfg.cache == nil || rc.Cache.Off {
		return false, false
	}
	if r.Stream {
		// A streamed caller waits for deltas, which a stored answer has
		// none of: it goes upstream, and its whole answer is stored.
		return false, r.Cache != CacheBypass && (r.Cache != CacheAuto || deterministic(r, rc))
	}
	switch r.Cache {
	case CacheUse:
		return true, true
	case CacheRefresh:
		return false, true
	case CacheBypass:
		return false, false
	}
	d := deterministic(r, rc)
	return d, d
}

// deterministic reports whether r's answer is the same every time by its
// route's rules: embeddings, temperature 0, or a seed where the route says
// seeds are reproducible.
func deterministic(r *Request, rc *routeConfig) bool {
	if r.Input.Op == OpEmbedding {
		return true
	}
	p := &r.Params
	return (p.Temperature != nil && *p.Temperature == 0) || (p.Seed != nil && rc.Cache.SeedReproducible)
}

// cacheKey returns c's cache key, its Identity computed once for the cache
// and dedup.
func cacheKey(c *Call, id Identity) *CacheKey {
	k := &CacheKey{Route: c.rc.Name, ID: id, TTL: c.rc.Cache.TTL, MaxBytes: c.rc.Cache.MaxBytes}
	if !c.rc.Cache.Shared {
		k.Tenant = c.req.Tenant
	}
	return k
}

// cacheAdmit gives c its cache key, and when lookup says so looks it up:
// in memory at once, and in the shared layer off the admission path. It
// reports whether c needs nothing more from Submit: it ended with a hit,
// or it is being looked up and will be queued on a miss. hold is what c's
// admission took of its tenant's quotas: a hit gives back its RPM and TPM.
func (b *Batcher) cacheAdmit(c *Call, lookup bool, now time.Time, hold *tenantHold) bool {
	c.cache = cacheKey(c, identity(c.req, c.rc))
	if !lookup {
		return false
	}
	if b.cacheHit(c, now, hold) {
		if c.tenant != nil {
			c.tenant.admitted.Add(1)
		}
		return true
	}
	if !b.cfg.cache.Remote() {
		return false
	}
	if c.tenant != nil {
		c.tenant.admitted.Add(1)
	}
	b.fetches.Add(1)
	go b.cacheFetch(c, *hold)
	return true
}

// cacheLeads looks c up again once it leads a new dedup group: an
// identical request that was in flight when c missed may have stored its
// answer and left its group since, and c would go upstream for it again.
// It reports whether c ended with the hit.
func (b *Batcher) cacheLeads(c *Call, now time.Time, hold *tenantHold) bool {
	if c.req.Cache == CacheRefresh {
		return false
	}
	r, ok := b.cfg.cache.Again(c.cache)
	if !ok {
		return false
	}
	hold.spare(now)
	return b.serveHit(c, r, now)
}

// identity returns c's Identity, computed once with its cache key.
func (c *Call) identity() Identity {
	if c.cache != nil {
		return c.cache.ID
	}
	return identity(c.req, c.rc)
}

// cacheHit ends c with the answer cached under its key, if there is one in
// memory and its deadline has not passed; it reports whether c ended.
func (b *Batcher) cacheHit(c *Call, now time.Time, hold *tenantHold) bool {
	r, ok := b.cfg.cache.Get(c.cache)
	if !ok {
		return false
	}
	hold.spare(now)
	return b.serveHit(c, r, now)
}

// serveHit ends c with the cached answer r, or with ErrDeadline when c's
// deadline has passed (a hit is never served late). It reports whether
// this ended c.
//
// Either way c goes nowhere upstream, and its callers first give back
// what its admission took of its tenant's RPM and TPM (tenantHold.spare),
// so that a hit spends no budget: the backends' and the fleet's are only
// spent at dispatch, which a hit never reaches.
func (b *Batcher) serveHit(c *Call, r *Result, now time.Time) bool {
	if b.clock.monoOf(now) >= c.deadline {
		return c.finish(Result{Err: ErrDeadline}, now)
	}
	res := *r
	res.Cached = true
	return c.finish(res, now)
}

// cacheFetch looks c up in the cache's shared layer, off the admission
// path, then serves the hit or queues c as Submit would have.
func (b *Batcher) cacheFetch(c *Call, hold tenantHold) {
	defer b.fetches.Done()
	ctx, cancel := context.WithDeadline(context.Background(), c.deadlineTime())
	r, ok := b.cfg.cache.Fetch(ctx, c.cache)
	cancel()
	now := time.Now()
	if ok {
		hold.spareLate(c.tokens)
		if b.serveHit(c, r, now) {
			return
		}
	}
	if !c.pending() {
		return // cancelled, or its deadline passed, while it looked
	}
	if b.clock.monoOf(now) >= c.deadline {
		c.finish(Result{Err: ErrDeadline}, now)
		return
	}
	// What Submit does on a miss, without its hot-lane shortcut.
	l, err := b.laneFor(keyOf(c.req, c.rc, c.target), c.rc, c.req)
	if err != nil {
		c.finish(Result{Err: err}, now)
		return
	}
	c.emit(Event{Kind: EventQueued, Time: now, Lane: l.name})
	if dedupable(c.req) && b.dedup.join(c, keyWith(c.req, c.rc, c.target, AllParams)) {
		c.rc.targets[c.target].be.stats.dedupHits.Add(1)
		return
	}
	b.admit.track(c)
	if !l.push(c) {
		b.enqueue(c)
	}
}

// cacheStore stores c's answer r when c asked for it, r is a whole answer
// (no error, not a stream cut short) from the route's first target, and r is not itself a shared
// or cached one (its leader stored it). It runs before c's done is
// signalled and before its dedup group dissolves, so that an identical
// request admitted after either finds the answer.
func (c *Call) cacheStore(r *Result) {
	if r.Err != nil || r.Partial || r.Cached || r.Deduplicated || c.target != 0 {
		return
	}
	v := *r
	v.BatchID, v.BatchSize, v.Attempts, v.Timings = "", 0, 0, Timings{}
	c.b.cfg.cache.Put(c.cache, &v)
}
