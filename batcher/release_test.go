package batcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// reusedReq is a request and its sink in one block, reused once its
// EventDone released it, as the server's stream items are.
type reusedReq struct {
	req      Request
	text     string
	err      error
	released bool
	wrongReq bool          // the EventDone carried another request or result
	res      Result        // the core's result slot (ResultHolder)
	done     chan struct{} // capacity 1: EventDone arrived
}

func (it *reusedReq) ResultSlot() *Result { return &it.res }

func (it *reusedReq) OnEvent(ev *Event) {
	if ev.Kind != EventDone {
		return
	}
	it.wrongReq = ev.Request != &it.req || ev.Result != &it.res
	it.text, it.err, it.released = ev.Result.Text, ev.Result.Err, ev.Released
	it.done <- struct{}{}
}

// TestReleasedRequestIsTheSinks drives sink requests, each holding its
// own result slot (ResultHolder), through every path a call can leave by
// (a batch's result, a retry then a result, a fallback, a cancel while
// its batch is upstream, a deadline, an eviction, a dedup group) from
// many goroutines, and reuses each request the core released
// (Event.Released) for the next one at once: under the race detector, any
// read of a released request or write of its slot by the core races with
// that reuse. Every success must carry its own prompt's answer, a success
// alone in no group and no eviction list must be released, and a request
// cancelled or evicted (ended by another than its batch) must not be.
func TestReleasedRequestIsTheSinks(t *testing.T) {
	flaky := flakyBackend(5, 6)
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: flaky, MaxConcurrency: 3,
			Retry:   RetryPolicy{MaxRetries: 1, InitialBackoff: 100 * time.Microsecond, MaxBackoff: time.Millisecond},
			Breaker: BreakerConfig{Consecutive: -1}}),
		WithBackend(BackendConfig{Name: "backup", Backend: &fakeBackend{}, MaxConcurrency: 2}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Fallbacks: []Target{{Backend: "backup"}},
			Batch: BatchConfig{MaxBatchSize: 8, Window: 200 * time.Microsecond, MaxWait: 2 * time.Millisecond}}),
		WithQueueCapacity(48),
	)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	const workers, each = 16, 300
	var releasedN sync.Map
	for g := range workers {
		wg.Go(func() {
			var free []*reusedReq
			zero, seed := float32(0), int64(7)
			released := 0
			for i := range each {
				var it *reusedReq
				if n := len(free); n > 0 {
					it, free = free[n-1], free[:n-1]
				} else {
					it = &reusedReq{done: make(chan struct{}, 1)}
				}
				prompt := fmt.Sprintf("%d-%d", g, i)
				// Every field written: a released request is the sink's.
				it.req = Request{ID: prompt, Route: "m", Priority: Priority(i % numPriorities),
					Input: Input{Op: OpCompletion, Prompt: prompt}, Sink: it}
				it.text, it.err, it.released, it.wrongReq = "", nil, false, false
				it.res = Result{}
				dedup := false
				switch i % 7 {
				case 1:
					it.req.Timeout = time.Duration(i%3) * 200 * time.Microsecond
				case 2: // identical to other workers' at the same i: a dedup group
					it.req.Params.Temperature, it.req.Params.Seed = &zero, &seed
					it.req.Input.Prompt = fmt.Sprintf("shared-%d", i)
					dedup = true
				}
				c, err := b.Submit(context.Background(), &it.req)
				if err != nil {
					if !errors.Is(err, ErrQueueFull) {
						t.Errorf("%s: Submit: %v", prompt, err)
					}
					continue
				}
				cancelled := i%7 == 3
				if cancelled {
					go c.Cancel() // perhaps while its batch is upstream
				}
				<-it.done
				want := "re:" + it.req.Input.Prompt
				switch {
				case it.wrongReq:
					t.Errorf("%s: EventDone carried another request or result slot", prompt)
				case c.Result().Text != it.text:
					t.Errorf("%s: Call.Result's text %q, EventDone's %q", prompt, c.Result().Text, it.text)
				case it.err == nil && it.text != want:
					t.Errorf("%s: text %q, want %q: another request's result", prompt, it.text, want)
				case it.err == nil && !dedup && evictClass(it.req.Priority) < 0 && !it.released:
					t.Errorf("%s: ended with its batch's answer, alone, but not released", prompt)
				case (errors.Is(it.err, ErrCanceled) || errors.Is(it.err, ErrEvicted)) && it.released:
					t.Errorf("%s: ended with %v, yet released", prompt, it.err)
				}
				if it.released {
					released++
					free = append(free, it) // written over by the next request
				}
			}
			releasedN.Store(g, released)
		})
	}
	wg.Wait()
	total := 0
	releasedN.Range(func(_, v any) bool { total += v.(int); return true })
	if total == 0 {
		t.Error("no request was released")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
