package cache

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/fleet/fleettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTest(t testing.TB, opts ...Option) *Cache {
	t.Helper()
	c, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return c
}

// testRedisTimeout bounds the Redis commands of the tests in which Redis
// must answer. DefaultRedisTimeout (100 ms) is a production bound that a
// loaded CI machine can pass (a first command dials and says HELLO too):
// a GET or a write timed out is a miss, or a dropped write, and pauses
// Redis for a second, and such a test would fail with nothing wrong.
const testRedisTimeout = 10 * time.Second

func key(route, tenant string, n byte) *batcher.CacheKey {
	return &batcher.CacheKey{Route: route, Tenant: tenant, ID: batcher.Identity{n}, TTL: time.Hour}
}

func TestGetFindsWhatPutStored(t *testing.T) {
	c := newTest(t)
	want := &batcher.Result{Text: "hi", Usage: batcher.Usage{PromptTokens: 1}}
	c.Put(key("r", "a", 1), want)
	if got, ok := c.Get(key("r", "a", 1)); !ok || got != want {
		t.Fatalf("Get = %v, %v", got, ok)
	}
	for _, k := range []*batcher.CacheKey{key("r", "b", 1), key("r", "a", 2), key("r", "", 1)} {
		if _, ok := c.Get(k); ok {
			t.Errorf("%+v: found another key's answer", k)
		}
	}
	st := c.Stats()
	if len(st) != 1 || st[0].Hits[0] != 1 || st[0].Misses[0] != 3 || st[0].Bytes <= 0 {
		t.Fatalf("stats %+v", st)
	}
	if r := st[0].HitRatio(); r != 0.25 {
		t.Fatalf("hit ratio %v, want 0.25", r)
	}
}

func TestRouteBudgetsAreTheirOwn(t *testing.T) {
	c := newTest(t, WithMaxBytes(1<<20))
	small := func(n byte) *batcher.CacheKey { k := key("small", "", n); k.MaxBytes = 4 * entryOverhead; return k }
	big := &batcher.Result{Text: strings.Repeat("x", entryOverhead)}
	for n := range byte(20) {
		c.Put(small(n), big)
		c.Put(key("other", "", n), big)
	}
	c.def.c.CleanUp()
	(*c.parts.Load())["small"].c.CleanUp()
	held := 0
	for n := range byte(20) {
		if _, ok := c.Get(small(n)); ok {
			held++
		}
		if _, ok := c.Get(key("other", "", n)); !ok {
			t.Fatalf("the shared budget lost entry %d to another route's", n)
		}
	}
	if held > 2 {
		t.Fatalf("a route with room for 2 holds %d", held)
	}
	for _, s := range c.Stats() {
		if s.Route == "small" && (s.Evictions < 18 || s.Bytes > 4*entryOverhead) {
			t.Fatalf("small: %+v", s)
		}
	}
}

func TestTTLExpires(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	c := newTest(t, withClock(func() time.Time { return time.Unix(0, now.Load()) }))
	k := key("r", "", 1)
	k.TTL = time.Millisecond
	c.Put(k, &batcher.Result{Text: "x"})
	now.Add(int64(time.Millisecond - 1))
	if _, ok := c.Get(k); !ok {
		t.Fatal("a 1ms entry expired before its millisecond")
	}
	now.Add(1)
	if _, ok := c.Get(k); ok {
		t.Fatal("a 1ms entry outlived its millisecond")
	}
}

func TestBadOptionsFail(t *testing.T) {
	for _, o := range []Option{WithMaxBytes(0), WithRedisTimeout(0), WithRedisPrefix("")} {
		if c, err := New(o); err == nil {
			_ = c.Close(context.Background())
			t.Error("New accepted a bad option")
		}
	}
}

// TestCodecCarriesEveryField fills every field of a Result by reflection,
// so that a field added later is checked too.
func TestCodecCarriesEveryField(t *testing.T) {
	var r batcher.Result
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).Name == "Err" {
			continue // never stored
		}
		if !fill(v.Field(i)) {
			t.Fatalf("Result.%s: the test cannot fill a %s", v.Type().Field(i).Name, v.Field(i).Type())
		}
	}
	expires := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	b, err := encode(&r, expires)
	if err != nil {
		t.Fatal(err)
	}
	got, gotExp, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, r) || !gotExp.Equal(expires) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *got, r)
	}
	if _, _, err := decode(append([]byte{codecVersion + 1}, b[1:]...)); err == nil {
		t.Fatal("decoded another version's value")
	}
}

func fill(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		return fill(v.Elem())
	case reflect.Slice:
		e := reflect.New(v.Type().Elem()).Elem()
		if !fill(e) {
			return false
		}
		v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), e))
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		if !fill(k) || !fill(e) {
			return false
		}
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() && !fill(v.Field(i)) {
				return false
			}
		}
	default:
		return false
	}
	return true
}

// TestRedisSharesAcrossReplicas: what one replica stores, another finds in
// Redis (one GET) and then keeps in memory.
func TestRedisSharesAcrossReplicas(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	rdbA, rdbB := fleettest.Client(addr), fleettest.Client(addr)
	t.Cleanup(func() { _ = rdbA.Close(); _ = rdbB.Close() })
	a, err := New(WithRedis(rdbA), WithRedisPrefix(prefix), WithRedisTimeout(testRedisTimeout))
	if err != nil {
		t.Fatal(err)
	}
	b := newTest(t, WithRedis(rdbB), WithRedisPrefix(prefix), WithRedisTimeout(testRedisTimeout))
	want := &batcher.Result{Text: "shared", Embedding: []float32{1, 2}, Usage: batcher.Usage{PromptTokens: 2}}
	a.Put(key("r", "t", 1), want)
	if err := a.Close(context.Background()); err != nil { // writes what is queued
		t.Fatal(err)
	}
	if _, ok := b.Get(key("r", "t", 1)); ok {
		t.Fatal("b's memory has what only a stored")
	}
	if _, ok := b.Fetch(context.Background(), key("r", "other", 1)); ok {
		t.Fatal("another tenant found it in Redis")
	}
	got, ok := b.Fetch(context.Background(), key("r", "t", 1))
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Fetch = %+v, %v", got, ok)
	}
	if _, ok := b.Get(key("r", "t", 1)); !ok {
		t.Fatal("a Redis hit was not kept in memory")
	}
	st := b.Stats()[0]
	if st.Hits != [2]int64{1, 1} || st.Misses != [2]int64{1, 1} {
		t.Fatalf("stats %+v", st)
	}
}

// TestRedisAwayIsAMiss: with Redis cut, Fetch misses within the timeout,
// Put still keeps the answer in memory, and Redis is left alone after the
// first failure.
//
// The cache's clock stands still: on the wall clock, the pause after the
// failure (redisPause, 1 s) could end before the second lookup on a loaded
// machine, which then tries Redis again and counts a second error.
func TestRedisAwayIsAMiss(t *testing.T) {
	addr := fleettest.Redis(t)
	px := fleettest.Proxies(t, addr, 1)[0]
	rdb := fleettest.Client(px.Addr())
	t.Cleanup(func() { _ = rdb.Close() })
	now := time.Now()
	c := newTest(t, WithRedis(rdb), WithRedisPrefix(fleettest.Prefix(t, addr)), WithRedisTimeout(50*time.Millisecond),
		withClock(func() time.Time { return now }))
	px.Cut()
	start := time.Now()
	if _, ok := c.Fetch(context.Background(), key("r", "", 1)); ok {
		t.Fatal("hit with Redis away")
	}
	c.Put(key("r", "", 1), &batcher.Result{Text: "x"})
	if _, ok := c.Get(key("r", "", 1)); !ok {
		t.Fatal("Put lost the answer with Redis away")
	}
	if _, ok := c.Fetch(context.Background(), key("r", "", 2)); ok {
		t.Fatal("hit with Redis away")
	}
	// Each lookup is bounded by the 50 ms timeout; 5 s catches one that
	// waits on Redis (its dial timeout, retries) without failing a slow
	// machine.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("two lookups with Redis away took %v", d)
	}
	if st := c.Stats()[0]; st.RedisErrors != 1 {
		t.Fatalf("redis errors %d, want 1 (the second lookup leaves Redis alone)", st.RedisErrors)
	}
}

// TestRetainForgetsRemovedRoutes: after a reload removes routes, the cache
// keeps nothing of them: not their budgets, their answers (in their own
// budget or the shared one), their counts or their metrics series; a
// route that lost its own budget loses its answers and its budget, and
// keeps its counts.
func TestRetainForgetsRemovedRoutes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	c := newTest(t, WithMeterProvider(mp))
	own := func(route string) *batcher.CacheKey { k := key(route, "t", 1); k.MaxBytes = 1 << 20; return k }
	for _, k := range []*batcher.CacheKey{own("kept"), own("unbudgeted"), own("gone"), key("gone-shared", "t", 2), key("kept-shared", "t", 3)} {
		c.Put(k, &batcher.Result{Text: k.Route})
	}
	routes := func() map[string]bool {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				var sets []attribute.Set
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						sets = append(sets, p.Attributes)
					}
				case metricdata.Gauge[int64]:
					for _, p := range d.DataPoints {
						sets = append(sets, p.Attributes)
					}
				}
				for _, s := range sets {
					r, _ := s.Value("batcher.route")
					seen[r.AsString()] = true
				}
			}
		}
		return seen
	}
	if got := routes(); len(got) != 5 {
		t.Fatalf("metrics series for %v before the reload, want 5 routes", got)
	}

	c.Retain([]batcher.Route{
		{Name: "kept", Cache: batcher.RouteCache{MaxBytes: 1 << 20}},
		{Name: "unbudgeted"},
		{Name: "kept-shared"},
	})

	if got := routes(); !reflect.DeepEqual(got, map[string]bool{"kept": true, "unbudgeted": true, "kept-shared": true}) {
		t.Fatalf("metrics series for %v after the reload", got)
	}
	var stats []string
	for _, s := range c.Stats() {
		stats = append(stats, s.Route)
		if s.Route == "unbudgeted" && s.Bytes != 0 {
			t.Errorf("unbudgeted still counts %d bytes", s.Bytes)
		}
	}
	if len(stats) != 3 {
		t.Fatalf("counts kept for %v", stats)
	}
	if parts := *c.parts.Load(); len(parts) != 1 || parts["kept"] == nil {
		t.Fatalf("own budgets kept: %v", parts)
	}
	if n := c.def.c.EstimatedSize(); n != 1 {
		t.Fatalf("the shared budget holds %d answers, want kept-shared's alone", n)
	}
	for _, k := range []*batcher.CacheKey{own("kept"), key("kept-shared", "t", 3)} {
		if _, ok := c.Get(k); !ok {
			t.Errorf("%s lost its answer", k.Route)
		}
	}
}
