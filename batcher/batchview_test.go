package batcher

import (
	"sync"
	"testing"
	"time"
)

// A tenant sees only its own share of a batch it shares with others: its
// own requests' count and a batch id of its own, the same for all of its
// requests in that batch; a request without a tenant sees the batch whole.
func TestBatchViewPerTenant(t *testing.T) {
	type seen struct {
		id string
		n  int
	}
	batches := make(chan seen, 2)
	be := &fakeBackend{fail: func(b *Batch, _ []Response) error {
		batches <- seen{b.ID, len(b.Requests)}
		return nil
	}}
	b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 4, MinBatchSize: 4, Window: time.Hour, MaxWait: time.Hour})

	var mu sync.Mutex
	events := map[string][]Event{}
	sink := sinkFunc(func(ev *Event) {
		if ev.Kind == EventBatched || ev.Kind == EventDispatched {
			mu.Lock()
			events[ev.Request.ID] = append(events[ev.Request.ID], *ev)
			mu.Unlock()
		}
	})
	tenants := map[string]string{"a1": "A", "a2": "A", "b1": "B", "x1": ""}
	var calls []*Call
	for _, id := range []string{"a1", "b1", "a2", "x1"} {
		r := req(id, PriorityNormal)
		r.Tenant, r.Sink = tenants[id], sink
		calls = append(calls, submit(t, b, r))
	}
	batch := <-batches
	for _, c := range calls {
		<-c.Done()
	}
	if batch.n != 4 {
		t.Fatalf("batch holds %d requests, want the 4 in one batch", batch.n)
	}
	res := map[string]Result{}
	for _, c := range calls {
		wantOK(t, c)
		res[c.req.ID] = c.Result()
	}
	wantSize := map[string]int{"a1": 2, "a2": 2, "b1": 1, "x1": 4}
	for id, r := range res {
		if r.BatchSize != wantSize[id] {
			t.Errorf("%s (tenant %q): BatchSize = %d, want %d", id, tenants[id], r.BatchSize, wantSize[id])
		}
		evs := events[id]
		if len(evs) != 2 {
			t.Fatalf("%s: %d batched/dispatched events, want 2", id, len(evs))
		}
		for _, ev := range evs {
			if ev.BatchID != r.BatchID {
				t.Errorf("%s: %v event batch id %q, result's %q", id, ev.Kind, ev.BatchID, r.BatchID)
			}
			if ev.Kind == EventBatched && ev.BatchSize != wantSize[id] {
				t.Errorf("%s: EventBatched size %d, want %d", id, ev.BatchSize, wantSize[id])
			}
		}
	}
	if res["x1"].BatchID != batch.id {
		t.Errorf("no tenant: BatchID = %q, want the batch's %q", res["x1"].BatchID, batch.id)
	}
	if res["a1"].BatchID != res["a2"].BatchID {
		t.Errorf("tenant A's two requests see batch ids %q and %q, want one", res["a1"].BatchID, res["a2"].BatchID)
	}
	for _, id := range []string{"a1", "b1"} {
		// The tenant's name is a keyed hash of the batch id: a random
		// 16-hex-digit name may hold the batch's short id by chance, so
		// compare it with the hash, not by substring.
		if got := res[id].BatchID; got == batch.id || got != b.tenantBatchID(batch.id, tenants[id]) || len(got) != 17 {
			t.Errorf("%s: BatchID = %q, want the tenant's own 17-character name %q, not the batch's %q", id, got, b.tenantBatchID(batch.id, tenants[id]), batch.id)
		}
	}
	if res["a1"].BatchID == res["b1"].BatchID {
		t.Errorf("tenants A and B both see batch id %q", res["a1"].BatchID)
	}

	// A batch of one tenant: the whole batch is its own, under its own name,
	// which differs from its name for the batch before.
	calls = calls[:0]
	for _, id := range []string{"a3", "a4", "a5", "a6"} {
		r := req(id, PriorityNormal)
		r.Tenant = "A"
		calls = append(calls, submit(t, b, r))
	}
	batch2 := <-batches
	for _, c := range calls {
		<-c.Done()
		wantOK(t, c)
		r := c.Result()
		if r.BatchSize != 4 || r.BatchID == batch2.id || r.BatchID == res["a1"].BatchID || r.BatchID != b.tenantBatchID(batch2.id, "A") {
			t.Errorf("%s: BatchID %q BatchSize %d; want A's own name for batch %q and 4", c.req.ID, r.BatchID, r.BatchSize, batch2.id)
		}
	}
}
