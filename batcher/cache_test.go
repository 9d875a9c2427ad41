package batcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// mapCache is a hand-written Cache: a map, with an optional shared layer
// whose Fetch may be held.
type mapCache struct {
	mu     sync.Mutex
	local  map[cacheMapKey]*Result
	shared map[cacheMapKey]*Result // nil: no shared layer
	// fetchHold, when set, holds every Fetch until it is closed or ctx ends.
	fetchHold chan struct{}
	// fetchDelay, when set, is how long every Fetch takes, whatever ctx.
	fetchDelay time.Duration

	gets, fetches, puts atomic.Int32
}

type cacheMapKey struct {
	route, tenant string
	id            Identity
}

func keyOfCache(k *CacheKey) cacheMapKey { return cacheMapKey{k.Route, k.Tenant, k.ID} }

func (m *mapCache) Get(k *CacheKey) (*Result, bool) {
	m.gets.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.local[keyOfCache(k)]
	return r, ok
}

func (m *mapCache) Again(k *CacheKey) (*Result, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.local[keyOfCache(k)]
	return r, ok
}

func (m *mapCache) Fetch(ctx context.Context, k *CacheKey) (*Result, bool) {
	m.fetches.Add(1)
	time.Sleep(m.fetchDelay)
	if m.fetchHold != nil {
		select {
		case <-m.fetchHold:
		case <-ctx.Done():
			return nil, false
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.shared[keyOfCache(k)]
	return r, ok
}

func (m *mapCache) Remote() bool { return m.shared != nil }

func (m *mapCache) Put(k *CacheKey, r *Result) {
	m.puts.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.local == nil {
		m.local = make(map[cacheMapKey]*Result)
	}
	m.local[keyOfCache(k)] = r
	if m.shared != nil {
		m.shared[keyOfCache(k)] = r
	}
}

func (m *mapCache) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.local)
}

// newCacheTest builds a Batcher with an embedding route "e", a chat route
// "c" and a completion route "m" on one fake backend, and the cache mc.
func newCacheTest(t *testing.T, mc *mapCache, be *fakeBackend, routes ...Route) *Batcher {
	t.Helper()
	opts := []Option{
		WithCache(mc),
		WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: 4}),
	}
	bc := BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}
	if len(routes) == 0 {
		routes = []Route{
			{Name: "e", Op: OpEmbedding, Backend: "be", Batch: bc},
			{Name: "c", Op: OpChat, Backend: "be", Batch: bc},
			{Name: "m", Op: OpCompletion, Backend: "be", Batch: bc},
		}
	}
	for _, r := range routes {
		opts = append(opts, WithRoute(r))
	}
	b, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return b
}

func embed(text, tenant string) *Request {
	return &Request{ID: text, Route: "e", Tenant: tenant, Input: Input{Op: OpEmbedding, Text: text}}
}

func chatReq(text string, temp *float32, seed *int64) *Request {
	return &Request{ID: text, Route: "c", Input: Input{Op: OpChat, Messages: []Message{{Role: "user", Content: text}}},
		Params: Params{Temperature: temp, Seed: seed}}
}

func do(t *testing.T, b *Batcher, r *Request) Result {
	t.Helper()
	res, err := b.Do(context.Background(), r)
	if err != nil {
		t.Fatalf("%s: %v", r.ID, err)
	}
	return res
}

func TestCacheServesRepeatsOfEmbeddings(t *testing.T) {
	be := &fakeBackend{}
	mc := &mapCache{}
	b := newCacheTest(t, mc, be)
	first := do(t, b, embed("hello", ""))
	if first.Cached {
		t.Fatal("first answer marked cached")
	}
	again := do(t, b, embed("hello", ""))
	if !again.Cached || again.Embedding[0] != first.Embedding[0] || again.Usage != first.Usage {
		t.Fatalf("repeat = %+v, want the first answer, cached", again)
	}
	if again.BatchID != "" || again.Attempts != 0 {
		t.Fatalf("a hit carries its first call's batch: %+v", again)
	}
	if n := be.calls.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1", n)
	}
	if n := b.Pending(); n != 0 {
		t.Fatalf("pending = %d after a hit", n)
	}
}

func TestCacheIsPerTenantUnlessShared(t *testing.T) {
	be := &fakeBackend{}
	mc := &mapCache{}
	bc := BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}
	b := newCacheTest(t, mc, be,
		Route{Name: "e", Op: OpEmbedding, Backend: "be", Batch: bc},
		Route{Name: "pub", Op: OpEmbedding, Backend: "be", Model: "e", Batch: bc, Cache: RouteCache{Shared: true}},
	)
	do(t, b, embed("x", "a"))
	if r := do(t, b, embed("x", "b")); r.Cached {
		t.Fatal("tenant b got tenant a's answer")
	}
	if r := do(t, b, embed("x", "a")); !r.Cached {
		t.Fatal("tenant a missed its own answer")
	}
	shared := func(tenant string) *Request { r := embed("y", tenant); r.Route = "pub"; return r }
	do(t, b, shared("a"))
	if r := do(t, b, shared("b")); !r.Cached {
		t.Fatal("a shared route's answer was not shared")
	}
}

func TestCacheFollowsTheRouteRules(t *testing.T) {
	zero, warm := float32(0), float32(0.7)
	seed := int64(7)
	bc := BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}
	for _, tc := range []struct {
		name   string
		rc     RouteCache
		temp   *float32
		seed   *int64
		mode   CacheMode
		cached bool
	}{
		{"temperature 0", RouteCache{}, &zero, nil, CacheAuto, true},
		{"temperature unset", RouteCache{}, nil, nil, CacheAuto, false},
		{"sampling", RouteCache{}, &warm, nil, CacheAuto, false},
		{"seed, not reproducible", RouteCache{}, &warm, &seed, CacheAuto, false},
		{"seed, reproducible", RouteCache{SeedReproducible: true}, &warm, &seed, CacheAuto, true},
		{"caller asks", RouteCache{}, &warm, nil, CacheUse, true},
		{"caller bypasses", RouteCache{}, &zero, nil, CacheBypass, false},
		{"route off", RouteCache{Off: true}, &zero, nil, CacheUse, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &fakeBackend{}
			mc := &mapCache{}
			b := newCacheTest(t, mc, be, Route{Name: "c", Op: OpChat, Backend: "be", Batch: bc, Cache: tc.rc})
			r := func() *Request { r := chatReq("q", tc.temp, tc.seed); r.Cache = tc.mode; return r }
			do(t, b, r())
			if got := do(t, b, r()); got.Cached != tc.cached {
				t.Fatalf("second answer cached = %v, want %v", got.Cached, tc.cached)
			}
			if want := map[bool]int32{true: 1, false: 2}[tc.cached]; be.calls.Load() != want {
				t.Fatalf("upstream calls = %d, want %d", be.calls.Load(), want)
			}
		})
	}
}

func TestCacheRefreshGoesUpstreamAndStores(t *testing.T) {
	be := &fakeBackend{}
	mc := &mapCache{}
	b := newCacheTest(t, mc, be)
	do(t, b, embed("x", ""))
	r := embed("x", "")
	r.Cache = CacheRefresh
	if got := do(t, b, r); got.Cached {
		t.Fatal("a refresh was served from the cache")
	}
	if be.calls.Load() != 2 || mc.puts.Load() != 2 {
		t.Fatalf("upstream calls %d, puts %d, want 2 and 2", be.calls.Load(), mc.puts.Load())
	}
	if got := do(t, b, embed("x", "")); !got.Cached {
		t.Fatal("the refreshed answer is not served")
	}
}

// TestCacheKeepsFailuresAndCancellationsOut: neither an error nor a
// request cancelled while its batch was upstream leaves anything behind.
func TestCacheKeepsFailuresAndCancellationsOut(t *testing.T) {
	be := &fakeBackend{}
	be.fail = func(b *Batch, out []Response) error {
		if b.Requests[0].Input.Text == "bad" {
			return &UpstreamError{Class: ClassInvalidRequest, Message: "no"}
		}
		return nil
	}
	mc := &mapCache{}
	b := newCacheTest(t, mc, be)
	if _, err := b.Do(context.Background(), embed("bad", "")); err == nil {
		t.Fatal("want the upstream's error")
	}
	if n := mc.len(); n != 0 {
		t.Fatalf("a failure was cached: %d entries", n)
	}

	be.hold = make(chan struct{})
	be.started = make(chan *Batch, 1)
	c := submit(t, b, embed("slow", ""))
	<-be.started
	c.Cancel()
	close(be.hold)
	wantErr(t, c, ErrCanceled)
	if n := mc.len(); n != 0 {
		t.Fatalf("a cancelled request was cached: %d entries", n)
	}
}

// TestCacheForgetsAnOldModel: after a reload points the route at another
// model, nothing the old model answered is served.
func TestCacheForgetsAnOldModel(t *testing.T) {
	be := &fakeBackend{}
	mc := &mapCache{}
	bc := BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}
	b := newCacheTest(t, mc, be, Route{Name: "e", Op: OpEmbedding, Backend: "be", Model: "v1", Batch: bc})
	do(t, b, embed("x", ""))
	if err := b.SetRoutes(Route{Name: "e", Op: OpEmbedding, Backend: "be", Model: "v2", Batch: bc}); err != nil {
		t.Fatal(err)
	}
	if r := do(t, b, embed("x", "")); r.Cached {
		t.Fatal("served v1's answer after the route moved to v2")
	}
	if err := b.SetRoutes(Route{Name: "e", Op: OpEmbedding, Backend: "be", Model: "v2", Batch: bc, Cache: RouteCache{TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if r := do(t, b, embed("x", "")); !r.Cached {
		t.Fatal("a reload that kept the model lost the cache")
	}
}

// TestCacheSharedLayerOffAdmission: a memory miss looks in the shared layer
// after Submit returned; a hit there ends the call, a miss queues it.
func TestCacheSharedLayerOffAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		mc := &mapCache{shared: map[cacheMapKey]*Result{}, fetchHold: make(chan struct{})}
		b := newCacheTest(t, mc, be)
		c := submit(t, b, embed("x", ""))
		synctest.Wait()
		if isDone(c) || mc.fetches.Load() != 1 {
			t.Fatalf("done %v, fetches %d: want a held fetch", isDone(c), mc.fetches.Load())
		}
		close(mc.fetchHold)
		synctest.Wait()
		wantOKEmbed(t, c, false)
		if be.calls.Load() != 1 {
			t.Fatalf("upstream calls = %d after a miss", be.calls.Load())
		}
		// Another replica: its memory is empty, the shared layer has it.
		mc.mu.Lock()
		mc.local = nil
		mc.mu.Unlock()
		c = submit(t, b, embed("x", ""))
		synctest.Wait()
		wantOKEmbed(t, c, true)
		if be.calls.Load() != 1 {
			t.Fatalf("upstream calls = %d after a shared hit", be.calls.Load())
		}
	})
}

// TestCacheNeverServesLate: a hit found after the request's deadline ends
// it with ErrDeadline instead.
func TestCacheNeverServesLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		mc := &mapCache{shared: map[cacheMapKey]*Result{}, fetchDelay: 2 * time.Second}
		b := newCacheTest(t, mc, be)
		mc.shared[keyOfCache(&CacheKey{Route: "e", ID: identity(embed("x", ""), (*b.routes.Load())["e"])})] = &Result{Embedding: []float32{1}}
		r := embed("x", "")
		r.Timeout = time.Second
		c := submit(t, b, r)
		time.Sleep(2 * time.Second) // the hit comes back after the deadline
		synctest.Wait()
		wantErr(t, c, ErrDeadline)
		if be.calls.Load() != 0 {
			t.Fatal("a request past its deadline went upstream")
		}
	})
}

// TestCacheDedupThenCache: identical requests in flight share one upstream
// call (dedup); those after it ends hit the cache: one call in all.
func TestCacheDedupThenCache(t *testing.T) {
	be := &fakeBackend{hold: make(chan struct{})}
	mc := &mapCache{}
	b := newCacheTest(t, mc, be)
	var calls []*Call
	for range 10 {
		calls = append(calls, submit(t, b, embed("x", "")))
	}
	close(be.hold)
	for _, c := range calls {
		<-c.Done()
	}
	for range 10 {
		if r := do(t, b, embed("x", "")); !r.Cached {
			t.Fatal("a repeat after the answer missed the cache")
		}
	}
	if n := be.calls.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1", n)
	}
}

func TestCacheRouteSettingsChecked(t *testing.T) {
	for _, rc := range []RouteCache{{TTL: -1}, {TTL: MaxCacheTTL + 1}, {MaxBytes: -1}} {
		_, err := New(WithCache(&mapCache{}), WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}}),
			WithRoute(Route{Name: "e", Op: OpEmbedding, Backend: "be", Cache: rc}))
		if err == nil {
			t.Errorf("%+v: New accepted it", rc)
		}
	}
}

func wantOKEmbed(t *testing.T, c *Call, cached bool) {
	t.Helper()
	if !isDone(c) {
		t.Fatalf("%s: not done", c.req.ID)
	}
	r := c.Result()
	if r.Err != nil || len(r.Embedding) == 0 || r.Cached != cached {
		t.Fatalf("%s: %+v, want an embedding, cached %v", c.req.ID, r, cached)
	}
}

// TestCacheHitSpendsNoBudget: a hit, from memory or from the shared
// layer, spends nothing of what bounds upstream work: not its tenant's
// RPM or TPM quota (a tenant allowed 2 requests or 5 tokens a minute gets
// 20 hits after its one miss), not the backend's own RPM and TPM, not the
// fleet's (one booking, the miss's).
func TestCacheHitSpendsNoBudget(t *testing.T) {
	for _, layer := range []string{"memory", "shared"} {
		for _, q := range []TenantQuotas{{RPM: 2}, {TPM: 5}} {
			t.Run(fmt.Sprintf("%s/rpm=%d,tpm=%d", layer, q.RPM, q.TPM), func(t *testing.T) {
				mc := &mapCache{}
				if layer == "shared" {
					mc.shared = map[cacheMapKey]*Result{}
				}
				be := &fakeBackend{}
				co := &fakeCoordinator{}
				b, err := New(WithCache(mc), WithCoordinator(co),
					WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: 4, RPM: 600, TPM: 600}),
					WithRoute(Route{Name: "e", Op: OpEmbedding, Backend: "be", Batch: BatchConfig{MaxBatchSize: 1}}))
				if err != nil {
					t.Fatal(err)
				}
				shutdownAtEnd(t, b)
				if err := b.SetTenants([]TenantPolicy{{Name: "t", Quotas: q}}); err != nil {
					t.Fatal(err)
				}
				do(t, b, embed("hello", "t")) // the miss: 1 request, 2 tokens
				if layer == "shared" {
					mc.mu.Lock()
					clear(mc.local) // every repeat looks in the shared layer
					mc.mu.Unlock()
				}
				bs := (*b.routes.Load())["e"].targets[0].be
				var rpmBefore, tpmBefore float64
				bs.query(func() { rpmBefore, tpmBefore = bs.rpm.tokensAt(time.Now()), bs.tpm.tokensAt(time.Now()) })
				for i := range 20 {
					if r := do(t, b, embed("hello", "t")); !r.Cached {
						t.Fatalf("repeat %d went upstream", i)
					}
				}
				if layer == "shared" && mc.fetches.Load() != 21 {
					t.Fatalf("%d lookups in the shared layer, want 21 (the miss and 20 hits)", mc.fetches.Load())
				}
				if n := be.calls.Load(); n != 1 {
					t.Fatalf("%d upstream calls, want 1", n)
				}
				co.mu.Lock()
				booked := len(co.demands)
				co.mu.Unlock()
				if booked != 1 {
					t.Fatalf("%d bookings in the fleet's budget, want the miss's alone", booked)
				}
				var rpmAfter, tpmAfter float64
				bs.query(func() { rpmAfter, tpmAfter = bs.rpm.tokensAt(time.Now()), bs.tpm.tokensAt(time.Now()) })
				if rpmAfter < rpmBefore || tpmAfter < tpmBefore {
					t.Fatalf("the backend's budgets fell from rpm %v tpm %v to %v %v", rpmBefore, tpmBefore, rpmAfter, tpmAfter)
				}
				ts := b.tenants.Load().byName["t"]
				lim := ts.lim.Load()
				if lim.rpm != nil && lim.rpm.Tokens()+float64(ts.rpmCredit.Load()) < 1 {
					t.Fatalf("the tenant's RPM holds %v and %d credit, want the 1 the miss left", lim.rpm.Tokens(), ts.rpmCredit.Load())
				}
				if lim.tpm != nil && lim.tpm.Tokens()+float64(ts.tpmCredit.Load()) < 3 {
					t.Fatalf("the tenant's TPM holds %v and %d credit, want the 3 the miss left", lim.tpm.Tokens(), ts.tpmCredit.Load())
				}
				if st := b.Tenants()[0]; st.Admitted != 21 || st.Completed["ok"] != 21 || st.Pending != 0 {
					t.Fatalf("tenant counts %+v, want 21 admitted and ok", st)
				}
			})
		}
	}
}
