package batcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/batcherhq/batcher/internal/race"
)

// TestDoReuseKeepsResultsApart drives Do through every path a call can
// leave by (a batch's result, a retry then a result, a fallback, a
// cancelled or timed-out context, a request deadline, an eviction, a
// flush, a dedup group, a sink) from many goroutines. Do gives calls that
// nothing holds any more back to its pool; a call reused too early would hand one
// request's result to another, or end one twice. So every success must
// carry its own prompt's answer, and every error must be one a caller can
// get there.
func TestDoReuseKeepsResultsApart(t *testing.T) {
	flaky := flakyBackend(3, 4)
	backup := &fakeBackend{}
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: flaky, MaxConcurrency: 3,
			Retry:   RetryPolicy{MaxRetries: 1, InitialBackoff: 100 * time.Microsecond, MaxBackoff: time.Millisecond},
			Breaker: BreakerConfig{Consecutive: -1}}),
		WithBackend(BackendConfig{Name: "backup", Backend: backup, MaxConcurrency: 2}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Fallbacks: []Target{{Backend: "backup"}},
			Batch: BatchConfig{MaxBatchSize: 8, Window: 200 * time.Microsecond, MaxWait: 2 * time.Millisecond}}),
		WithQueueCapacity(48),
	)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	var wg sync.WaitGroup
	const workers, each = 16, 400
	for g := range workers {
		wg.Go(func() {
			zero, seed := float32(0), int64(7)
			for i := range each {
				prompt := fmt.Sprintf("%d-%d", g, i)
				// A fresh Request each time: one whose call ended early may
				// still be read by its batch's backend (Request's doc).
				r := &Request{ID: prompt, Route: "m", Priority: Priority(i % numPriorities), Input: Input{Op: OpCompletion, Prompt: prompt}}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch i % 11 {
				case 1:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%4)*100*time.Microsecond)
				case 2:
					r.Timeout = time.Duration(i%3) * 200 * time.Microsecond
				case 3:
					r.Sink = rec
				case 4: // identical to other workers' at the same i: a dedup group
					r.Params.Temperature, r.Params.Seed = &zero, &seed
					r.Input.Prompt = fmt.Sprintf("shared-%d", i)
				case 5:
					var cctx context.Context
					cctx, cancel = context.WithCancel(ctx)
					ctx = cctx
					go cancel()
				}
				res, err := b.Do(ctx, r)
				cancel()
				switch {
				case err == nil:
					if want := "re:" + r.Input.Prompt; res.Text != want {
						t.Errorf("%s: text %q, want %q: another request's result", prompt, res.Text, want)
					}
				case errors.Is(err, ErrCanceled), errors.Is(err, ErrDeadline), errors.Is(err, ErrEvicted),
					errors.Is(err, ErrQueueFull):
				default:
					var ue *UpstreamError
					if !errors.As(err, &ue) {
						t.Errorf("%s: unexpected error %v", prompt, err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			if err := b.Flush(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.Pending(); n != 0 {
		t.Fatalf("%d pending after Shutdown", n)
	}
}

// TestDoReusesCalls checks that Do's plain path takes its call from the
// pool: a steady stream of Do calls allocates no Call and no channel each,
// where Submit, whose calls the caller holds, allocates both.
func TestDoReusesCalls(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector makes sync.Pool drop a share of what is put back")
	}
	b := newTest(t, BackendFunc(func(_ context.Context, bt *Batch, out []Response) error {
		for i := range out {
			out[i].Text = "ok"
		}
		return nil
	}), 1, BatchConfig{MaxBatchSize: 1})
	r := &Request{ID: "a", Route: "m", Priority: PriorityNormal, Input: Input{Op: OpCompletion, Prompt: "p"}}
	ctx := context.Background()
	do := func() {
		if _, err := b.Do(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	submit := func() {
		c, err := b.Submit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Result().Err; err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // warm the pools
		do()
		submit()
	}
	// A GC may empty the pools once in a while: medians of a few rounds.
	var viaDo, viaSubmit []float64
	for range 5 {
		viaDo = append(viaDo, testing.AllocsPerRun(500, do))
		viaSubmit = append(viaSubmit, testing.AllocsPerRun(500, submit))
	}
	slices.Sort(viaDo)
	slices.Sort(viaSubmit)
	if d, s := viaDo[2], viaSubmit[2]; s-d < 1.5 {
		t.Fatalf("Do allocates %.2f times a call, Submit %.2f: Do should save its Call and its channel (2)", d, s)
	}
}

// TestAbortSparesReusedCalls cuts Shutdown's drain short (its context is
// already done) while 256 goroutines keep Do busy, so that abort, which
// ends whatever the runs in flight hold, meets runs in the middle of
// delivering. A call a run delivered may already be back in Do's pool or
// reused: abort must not reach it (it used to, and panicked on the zeroed
// call, or ended another request). Every result must be the request's
// own, or the shutdown's.
func TestAbortSparesReusedCalls(t *testing.T) {
	for round := range 20 {
		b, err := New(
			WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{latency: 200 * time.Microsecond}, MaxConcurrency: 4}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be",
				Batch: BatchConfig{MaxBatchSize: 64, Window: 100 * time.Microsecond, MaxWait: time.Millisecond}}),
			WithQueueCapacity(100_000),
		)
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg      sync.WaitGroup
			results atomic.Int64
			busy    = make(chan struct{})
			once    sync.Once
		)
		for g := range 256 {
			wg.Go(func() {
				for i := 0; ; i++ {
					p := fmt.Sprintf("%d-%d", g, i)
					res, err := b.Do(context.Background(), &Request{ID: p, Route: "m", Input: Input{Op: OpCompletion, Prompt: p}})
					switch {
					case err == nil:
						if res.Text != "re:"+p {
							t.Errorf("round %d, %s: text %q: another request's result", round, p, res.Text)
						}
						if results.Add(1) == 2000 {
							once.Do(func() { close(busy) })
						}
					case errors.Is(err, ErrClosed):
						return
					case !errors.Is(err, ErrShutdown):
						t.Errorf("round %d, %s: %v", round, p, err)
					}
				}
			})
		}
		<-busy
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the drain ends at once: abort
		_ = b.Shutdown(ctx)
		wg.Wait()
		wait, stop := context.WithTimeout(context.Background(), 10*time.Second)
		if err := b.Shutdown(wait); err != nil {
			t.Errorf("round %d: second Shutdown: %v", round, err)
		}
		stop()
		if n := b.Pending(); n != 0 {
			t.Fatalf("round %d: %d pending", round, n)
		}
	}
}

// TestCallSize holds a queued call to the 224-byte size class: every
// request allocates one (Do reuses its own), and BenchmarkQueuedMemory
// counts it. The Result is kept out of the call (Do's slot, or made at the
// end), and its admission and deadline are monos (clock.go), for this; a
// field added must find room, or the figure moves.
func TestCallSize(t *testing.T) {
	if n := unsafe.Sizeof(Call{}); n > 224 {
		t.Fatalf("a Call is %d bytes, want at most 224", n)
	}
}

// TestRequestSize holds what every queued request carries beside its Call
// (BenchmarkQueuedMemory): Params with the rich parameters behind one
// pointer (Params.Rich, as Request.Chat), the Request within the 256-byte
// size class.
func TestRequestSize(t *testing.T) {
	if n := unsafe.Sizeof(Params{}); n > 64 {
		t.Errorf("Params are %d bytes, want at most 64: a parameter only some requests set goes in RichParams", n)
	}
	if n := unsafe.Sizeof(Request{}); n > 256 {
		t.Errorf("a Request is %d bytes, want at most 256", n)
	}
}

// flakyBackend answers after 200 µs and fails as flakyFail does:
// retries and fallbacks for the reuse tests.
func flakyBackend(seed1, seed2 uint64) *fakeBackend {
	return &fakeBackend{latency: 200 * time.Microsecond, fail: flakyFail(seed1, seed2)}
}

// flakyFail, drawn from a generator seeded with seed1 and seed2, fails
// one batch in eight whole and one item of another in eight.
func flakyFail(seed1, seed2 uint64) func(*Batch, []Response) error {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed1, seed2))
	return func(b *Batch, out []Response) error {
		mu.Lock()
		defer mu.Unlock()
		switch rng.IntN(8) {
		case 0:
			return &UpstreamError{Class: ClassServer, Message: "injected batch failure"}
		case 1:
			out[rng.IntN(len(out))].Err = &UpstreamError{Class: ClassServer, Message: "injected item failure"}
		}
		return nil
	}
}
