package batcher

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func completion(id string) *Request {
	return &Request{ID: id, Route: "m", Input: Input{Op: OpCompletion, Prompt: id}}
}

// await waits for c's result, within d, and fails unless it succeeded.
func await(t *testing.T, c *Call, d time.Duration) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(d):
		t.Fatalf("%s: no result within %v", c.Request().ID, d)
	}
	if r := c.Result(); r.Err != nil {
		t.Fatalf("%s: %v", c.Request().ID, r.Err)
	}
}

// TestReconfigureRaisesConcurrencyInPlace: a backend at its concurrency
// limit holds a second batch; raising MaxConcurrency on the same
// implementation dispatches it at once, while the first is still held, on
// the same state (its counters go on).
func TestReconfigureRaisesConcurrencyInPlace(t *testing.T) {
	fb := &fakeBackend{hold: make(chan struct{}), started: make(chan *Batch, 4)}
	one := BatchConfig{MaxBatchSize: 1, Window: time.Millisecond}
	b := newTest(t, fb, 1, one)
	first := submit(t, b, completion("a"))
	<-fb.started
	second := submit(t, b, completion("b"))
	select {
	case <-fb.started:
		t.Fatal("a second batch went past a concurrency limit of 1")
	default:
	}
	route := Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: one}
	if err := b.Reconfigure([]BackendConfig{{Name: "be", Backend: fb, MaxConcurrency: 2}}, []Route{route}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fb.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the raised limit did not let the waiting batch go")
	}
	if got := fb.inflight.Load(); got != 2 {
		t.Fatalf("in flight: %d, want 2", got)
	}
	if mc, _, _ := b.BackendLimits("be"); mc != 2 {
		t.Fatalf("BackendLimits max concurrency: %d, want 2", mc)
	}
	close(fb.hold)
	for _, c := range []*Call{first, second} {
		await(t, c, time.Minute)
	}
	if st := b.Stats()[0]; st.Calls != 2 || st.Limit != 2 {
		t.Fatalf("stats after the change: calls %d limit %d, want 2 and 2", st.Calls, st.Limit)
	}
}

// TestReconfigureRaisesRPMInPlace: a request held by an RPM of 1 (its
// bucket empty for a minute) goes at once when the rate is raised.
func TestReconfigureRaisesRPMInPlace(t *testing.T) {
	fb := &fakeBackend{started: make(chan *Batch, 4)}
	one := BatchConfig{MaxBatchSize: 1, Window: time.Millisecond}
	b := newTest(t, fb, 4, one, withLimits("be", 1, 0))
	await(t, submit(t, b, completion("a")), time.Minute)
	<-fb.started
	held := submit(t, b, completion("b"))
	route := Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: one}
	if err := b.Reconfigure([]BackendConfig{{Name: "be", Backend: fb, MaxConcurrency: 4, RPM: 6000, RPMBurst: 100}}, []Route{route}); err != nil {
		t.Fatal(err)
	}
	await(t, held, 30*time.Second) // at the old rate: 60 s
	if _, rpm, _ := b.BackendLimits("be"); rpm != 6000 {
		t.Fatalf("BackendLimits rpm: %d, want 6000", rpm)
	}
}

// TestReconfigureNewImplementation: a backend given a new implementation
// serves requests admitted after the change, while a request in flight on
// the old one finishes there; a backend removed with work in flight lets
// it finish too.
func TestReconfigureNewImplementation(t *testing.T) {
	old := &fakeBackend{hold: make(chan struct{}), started: make(chan *Batch, 4)}
	gone := &fakeBackend{hold: make(chan struct{}), started: make(chan *Batch, 4)}
	one := BatchConfig{MaxBatchSize: 1, Window: time.Millisecond}
	b := newTest(t, old, 4, one,
		WithBackend(BackendConfig{Name: "gone", Backend: gone}),
		WithRoute(Route{Name: "g", Op: OpCompletion, Backend: "gone", Batch: one}))
	ctx := t.Context()
	onOld := submit(t, b, completion("a"))
	<-old.started
	onGone := submit(t, b, &Request{ID: "g1", Route: "g", Input: Input{Op: OpCompletion, Prompt: "g"}})
	<-gone.started

	next := &fakeBackend{}
	route := Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: one}
	if err := b.Reconfigure([]BackendConfig{{Name: "be", Backend: next}}, []Route{route}); err != nil {
		t.Fatal(err)
	}
	await(t, submit(t, b, completion("b")), time.Minute)
	if n := next.calls.Load(); n != 1 {
		t.Fatalf("new implementation: %d calls, want 1", n)
	}
	if _, err := b.Submit(ctx, &Request{Route: "g", Input: Input{Op: OpCompletion, Prompt: "g"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a removed route: %v, want ErrInvalid", err)
	}
	close(old.hold)
	close(gone.hold)
	for _, c := range []*Call{onOld, onGone} {
		await(t, c, time.Minute)
	}
	if n := old.calls.Load(); n != 1 {
		t.Fatalf("old implementation: %d calls, want 1", n)
	}
	if st := b.Stats(); len(st) != 1 || st[0].Name != "be" || st[0].Calls != 2 {
		t.Fatalf("stats: %+v, want be alone with its 2 calls", st)
	}
}

// TestReconfigureRefusedWhole: a bad backend or a route on an unknown
// backend refuses the whole set, and the old one keeps serving; after
// Shutdown, ErrClosed.
func TestReconfigureRefusedWhole(t *testing.T) {
	fb := &fakeBackend{}
	b := newTest(t, fb, 4, BatchConfig{MaxBatchSize: 1})
	route := Route{Name: "m", Op: OpCompletion, Backend: "be"}
	for name, tc := range map[string]struct {
		backends []BackendConfig
		routes   []Route
	}{
		"bad limit":       {[]BackendConfig{{Name: "be", Backend: fb, MaxConcurrency: 2, RPM: -1}}, []Route{route}},
		"unknown backend": {[]BackendConfig{{Name: "be", Backend: fb, MaxConcurrency: 2}}, []Route{{Name: "m", Op: OpCompletion, Backend: "other"}}},
		"no routes":       {[]BackendConfig{{Name: "be", Backend: fb, MaxConcurrency: 2}}, nil},
	} {
		if err := b.Reconfigure(tc.backends, tc.routes); err == nil {
			t.Fatalf("%s: taken", name)
		}
	}
	if mc, _, _ := b.BackendLimits("be"); mc != 4 {
		t.Fatalf("a refused set changed the limits: max concurrency %d, want 4", mc)
	}
	await(t, submit(t, b, completion("a")), time.Minute)
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.Reconfigure([]BackendConfig{{Name: "be", Backend: fb}}, []Route{route}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Shutdown: %v, want ErrClosed", err)
	}
}

// TestReconfigureUnderLoad: while 16 callers keep two routes busy,
// Reconfigure alternates the backends' limits, swaps one backend's
// implementation and removes and restores a route, 50 times. Every request
// admitted ends exactly once and succeeds (a request refused at admission
// on the removed route is the only failure allowed), and Shutdown leaves
// no goroutine behind (TestMain's leak check).
func TestReconfigureUnderLoad(t *testing.T) {
	fa, fb := &fakeBackend{latency: 100 * time.Microsecond}, &fakeBackend{latency: 100 * time.Microsecond}
	alt := &fakeBackend{latency: 100 * time.Microsecond}
	one := BatchConfig{MaxBatchSize: 4, Window: time.Millisecond}
	b := newTest(t, fa, 2, one,
		WithBackend(BackendConfig{Name: "b", Backend: fb, MaxConcurrency: 2}),
		WithRoute(Route{Name: "r2", Op: OpCompletion, Backend: "b", Batch: one}))
	stop := make(chan struct{})
	progress := make(chan struct{}, 64)       // a request ended
	var changed atomic.Pointer[chan struct{}] // closed by the next Reconfigure
	next := make(chan struct{})
	changed.Store(&next)
	var admitted, ended, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		route := []string{"m", "r2"}[i%2]
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := b.Submit(context.Background(), &Request{Route: route, Input: Input{Op: OpCompletion, Prompt: "p"}})
				if err != nil {
					if !errors.Is(err, ErrInvalid) || route != "r2" {
						t.Errorf("Submit on %s: %v", route, err)
						return
					}
					refused.Add(1)
					select { // the route is back at the next change
					case <-*changed.Load():
					case <-stop:
					}
					continue
				}
				admitted.Add(1)
				<-c.Done()
				if r := c.Result(); r.Err != nil {
					t.Errorf("a request across a reconfiguration: %v", r.Err)
					return
				}
				ended.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		})
	}
	for i := range 50 {
		impl := Backend(fb)
		if i%3 == 0 {
			impl = alt
		}
		backends := []BackendConfig{
			{Name: "be", Backend: fa, MaxConcurrency: 1 + i%4, RPM: []int{0, 60_000}[i%2], RPMBurst: 1000},
			{Name: "b", Backend: impl, MaxConcurrency: 2},
		}
		routes := []Route{{Name: "m", Op: OpCompletion, Backend: "be", Batch: one}}
		if i%5 != 4 {
			routes = append(routes, Route{Name: "r2", Op: OpCompletion, Backend: "b", Batch: one, Fallbacks: []Target{{Backend: "be"}}})
		}
		if err := b.Reconfigure(backends, routes); err != nil {
			t.Fatal(err)
		}
		next := make(chan struct{})
		close(*changed.Swap(&next))
		// Let some requests through on this configuration.
		for range 20 {
			select {
			case <-progress:
			case <-time.After(time.Minute):
				t.Fatalf("no progress after reconfiguration %d", i)
			}
		}
	}
	close(stop)
	wg.Wait()
	if admitted.Load() != ended.Load() {
		t.Fatalf("%d admitted, %d ended", admitted.Load(), ended.Load())
	}
	t.Logf("%d requests across 50 reconfigurations, %d refused on the removed route", ended.Load(), refused.Load())
}
