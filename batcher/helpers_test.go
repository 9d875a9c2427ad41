package batcher

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBackend is a hand-written Backend with hooks.
type fakeBackend struct {
	// hold, when set, holds every Dispatch until a value arrives (or it is
	// closed) or ctx ends.
	hold chan struct{}
	// latency, when set, is how long each Dispatch takes.
	latency time.Duration
	// fail, when set, may fill errors into out or return one.
	fail func(b *Batch, out []Response) error

	calls       atomic.Int32
	inflight    atomic.Int32
	maxInflight atomic.Int32
	started     chan *Batch // when set, receives every batch as it starts

	mu      sync.Mutex
	batches [][]string // request ids per batch, in dispatch order
	ctxErrs []error    // ctx.Err() seen by each Dispatch when it returned
}

// reporting returns a fakeBackend whose every reply reports usage u.
func reporting(u Usage) *fakeBackend {
	return &fakeBackend{fail: func(_ *Batch, out []Response) error {
		for i := range out {
			out[i].Usage = u
		}
		return nil
	}}
}

// failsFirst returns a fakeBackend whose first Dispatch fails with a
// retryable server error; the rest succeed.
func failsFirst() *fakeBackend {
	be := &fakeBackend{}
	be.fail = func(*Batch, []Response) error {
		if be.calls.Load() == 1 {
			return &UpstreamError{Class: ClassServer, Message: "try again"}
		}
		return nil
	}
	return be
}

func (f *fakeBackend) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	f.calls.Add(1)
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxInflight.Load()
		if n <= m || f.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	ids := make([]string, len(b.Requests))
	for i, r := range b.Requests {
		ids[i] = r.ID
	}
	f.mu.Lock()
	f.batches = append(f.batches, ids)
	f.mu.Unlock()
	if f.started != nil {
		f.started <- b
	}
	var err error
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err == nil && f.latency > 0 {
		t := time.NewTimer(f.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			err = ctx.Err()
		}
	}
	f.mu.Lock()
	f.ctxErrs = append(f.ctxErrs, ctx.Err())
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for i, r := range b.Requests {
		switch r.Input.Op {
		case OpEmbedding:
			out[i].Embedding = []float32{float32(len(r.Input.Text))}
		case OpChat:
			out[i].Text = "re:" + r.Input.Messages[len(r.Input.Messages)-1].Content
		default:
			out[i].Text = "re:" + r.Input.Prompt
		}
		out[i].Usage = Usage{PromptTokens: 1, CompletionTokens: 1}
	}
	if f.fail != nil {
		if err := f.fail(b, out); err != nil {
			clear(out) // a failed call answers nothing
			return err
		}
	}
	return nil
}

func (f *fakeBackend) batchIDs() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.batches...)
}

func (f *fakeBackend) sizes() []int {
	var s []int
	for _, b := range f.batchIDs() {
		s = append(s, len(b))
	}
	return s
}

// newTest builds a Batcher with one completion route "m" on backend "be"
// and shuts it down when the test ends.
func newTest(t *testing.T, be Backend, conc int, bc BatchConfig, opts ...Option) *Batcher {
	t.Helper()
	all := append([]Option{
		WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: conc}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: bc}),
	}, opts...)
	b, err := New(all...)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, b)
	return b
}

// shutdownAtEnd shuts b down when the test ends, and fails the test when
// Shutdown returns an error (within 10s, every pending call must end).
func shutdownAtEnd(t *testing.T, b *Batcher) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}

func req(id string, p Priority) *Request {
	return &Request{ID: id, Route: "m", Priority: p, Input: Input{Op: OpCompletion, Prompt: "prompt " + id}}
}

func submit(t *testing.T, b *Batcher, r *Request) *Call {
	t.Helper()
	c, err := b.Submit(context.Background(), r)
	if err != nil {
		t.Fatalf("Submit(%s): %v", r.ID, err)
	}
	return c
}

// isDone reports whether c has its result, without waiting.
func isDone(c *Call) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

func wantErr(t *testing.T, c *Call, want error) {
	t.Helper()
	if !isDone(c) {
		t.Fatalf("%s: not done, want %v", c.req.ID, want)
	}
	if got := c.Result().Err; !errors.Is(got, want) {
		t.Fatalf("%s: err = %v, want %v", c.req.ID, got, want)
	}
}

func wantOK(t *testing.T, c *Call) {
	t.Helper()
	if !isDone(c) {
		t.Fatalf("%s: not done", c.req.ID)
	}
	if r := c.Result(); r.Err != nil || r.Text == "" {
		t.Fatalf("%s: result %+v", c.req.ID, r)
	}
}

// recorder is an EventSink that keeps every event's kind per request id.
type recorder struct {
	mu     sync.Mutex
	events map[string][]EventKind
}

func (r *recorder) OnEvent(ev *Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.events == nil {
		r.events = make(map[string][]EventKind)
	}
	r.events[ev.Request.ID] = append(r.events[ev.Request.ID], ev.Kind)
}

func (r *recorder) of(id string) []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]EventKind(nil), r.events[id]...)
}

// withBackend edits the named backend's config; it must come after the
// WithBackend it edits.
func withBackend(name string, edit func(*BackendConfig)) Option {
	return func(c *config) {
		for i := range c.backends {
			if c.backends[i].Name == name {
				edit(&c.backends[i])
			}
		}
	}
}

func withLimits(name string, rpm, tpm int) Option {
	return withBackend(name, func(b *BackendConfig) { b.RPM, b.TPM = rpm, tpm })
}

func withConcurrencyFloor(name string, n int) Option {
	return withBackend(name, func(b *BackendConfig) { b.MinConcurrency = n })
}

func withBreaker(name string, bc BreakerConfig) Option {
	return withBackend(name, func(b *BackendConfig) { b.Breaker = bc })
}

func withRetry(name string, p RetryPolicy) Option {
	return withBackend(name, func(b *BackendConfig) { b.Retry = p })
}

// busyBackend returns a batcher whose backend has one slot, held by the
// call first until be.hold is closed, so that what is submitted next stays
// queued (windows of an hour). Call it inside a synctest bubble.
func busyBackend(t *testing.T) (b *Batcher, be *fakeBackend, first *Call) {
	t.Helper()
	be = &fakeBackend{hold: make(chan struct{})}
	b = newTest(t, be, 1, BatchConfig{MaxBatchSize: 100, MinBatchSize: 1, Window: time.Hour, MaxWait: time.Hour})
	first = submit(t, b, req("first", PriorityNormal))
	synctest.Wait()
	return b, be, first
}
