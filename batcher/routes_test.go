package batcher

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSetRoutes: a route added is served, a removed one refuses new
// requests while those admitted before finish on it, a changed one serves
// new requests with its new settings, and a bad set is refused whole.
func TestSetRoutes(t *testing.T) {
	release := make(chan struct{})
	var sizes = make(chan int, 64)
	held := BackendFunc(func(ctx context.Context, bt *Batch, out []Response) error {
		sizes <- len(bt.Requests)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		for i := range out {
			out[i].Text = "ok " + bt.Route
		}
		return nil
	})
	one := BatchConfig{MaxBatchSize: 1, Window: time.Millisecond}
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: held, MaxConcurrency: 16}),
		WithRoute(Route{Name: "old", Op: OpCompletion, Backend: "be", Batch: one}),
		WithRoute(Route{Name: "kept", Op: OpCompletion, Backend: "be", Batch: one}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	ctx := t.Context()
	req := func(route string) *Request {
		return &Request{Route: route, Input: Input{Op: OpCompletion, Prompt: "x"}}
	}
	inFlight, err := b.Submit(ctx, req("old"))
	if err != nil {
		t.Fatal(err)
	}
	<-sizes // dispatched, held

	if err := b.SetRoutes(Route{Name: "kept", Op: OpCompletion, Backend: "nope"}); err == nil {
		t.Fatal("a route on an unknown backend was taken")
	}
	if _, err := b.Submit(ctx, req("old")); err != nil {
		t.Fatalf("after a refused SetRoutes the old routes must stay: %v", err)
	}
	<-sizes
	four := BatchConfig{MaxBatchSize: 4, MinBatchSize: 4, Window: time.Hour, MaxWait: time.Hour}
	if err := b.SetRoutes(
		Route{Name: "kept", Op: OpCompletion, Backend: "be", Batch: four},
		Route{Name: "new", Op: OpCompletion, Backend: "be", Batch: one},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Submit(ctx, req("old")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a removed route: %v, want ErrInvalid (unknown model)", err)
	}
	calls := []*Call{}
	for range 4 {
		c, err := b.Submit(ctx, req("kept"))
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	if n := <-sizes; n != 4 {
		t.Fatalf("kept's batch of %d, want its new max batch size 4", n)
	}
	c, err := b.Submit(ctx, req("new"))
	if err != nil {
		t.Fatal(err)
	}
	calls = append(calls, c)
	<-sizes
	close(release)
	if r := wait(inFlight); r.Err != nil || r.Text != "ok old" {
		t.Fatalf("the request on the removed route: %+v", r)
	}
	for _, c := range calls {
		if r := wait(c); r.Err != nil {
			t.Fatalf("%v", r.Err)
		}
	}
	if got := len(b.Routes()); got != 2 {
		t.Fatalf("%d routes, want 2", got)
	}
}

func wait(c *Call) Result {
	<-c.Done()
	return c.Result()
}

// TestDedupKeepsTenantsApart: identical requests in flight together share
// one upstream call within a tenant, never across tenants.
func TestDedupKeepsTenantsApart(t *testing.T) {
	release := make(chan struct{})
	calls := make(chan int, 16)
	held := BackendFunc(func(ctx context.Context, bt *Batch, out []Response) error {
		calls <- len(bt.Requests)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: held, MaxConcurrency: 16}),
		WithRoute(Route{Name: "e", Op: OpEmbedding, Backend: "be", Batch: BatchConfig{MaxBatchSize: 1, Window: time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	var cs []*Call
	for _, tenant := range []string{"a", "a", "b"} {
		c, err := b.Submit(t.Context(), &Request{Route: "e", Tenant: tenant, Input: Input{Op: OpEmbedding, Text: "same"}})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	<-calls
	<-calls // a's and b's: two upstream calls
	close(release)
	for _, c := range cs {
		wait(c)
	}
	if !cs[1].Result().Deduplicated || cs[2].Result().Deduplicated {
		t.Fatalf("deduplicated: a's second %v (want true), b's %v (want false)", cs[1].Result().Deduplicated, cs[2].Result().Deduplicated)
	}
	select {
	case n := <-calls:
		t.Fatalf("a third upstream call (%d requests)", n)
	default:
	}
}

// TestRouteHintFollowsSetRoutes: the route a lookup found last (route's
// hint) is never served from an old table: a route changed by SetRoutes
// serves its next request on its new settings, and a removed one is
// unknown at once.
func TestRouteHintFollowsSetRoutes(t *testing.T) {
	echo := BackendFunc(func(_ context.Context, bt *Batch, out []Response) error {
		for i := range out {
			out[i].Text = bt.Model
		}
		return nil
	})
	one := BatchConfig{MaxBatchSize: 1}
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: echo}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Model: "first", Batch: one}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	do := func() (string, error) {
		res, err := b.Do(t.Context(), &Request{Route: "m", Input: Input{Op: OpCompletion, Prompt: "x"}})
		return res.Text, err
	}
	for range 2 { // the second is served from the hint
		if got, err := do(); err != nil || got != "first" {
			t.Fatalf("before SetRoutes: %q, %v; want first", got, err)
		}
	}
	if err := b.SetRoutes(Route{Name: "m", Op: OpCompletion, Backend: "be", Model: "second", Batch: one}); err != nil {
		t.Fatal(err)
	}
	if got, err := do(); err != nil || got != "second" {
		t.Fatalf("after SetRoutes: %q, %v; want second", got, err)
	}
	if err := b.SetRoutes(Route{Name: "other", Op: OpCompletion, Backend: "be", Batch: one}); err != nil {
		t.Fatal(err)
	}
	if _, err := do(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a removed route: %v, want ErrInvalid", err)
	}
}
