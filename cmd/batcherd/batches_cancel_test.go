package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/openaiapi"
)

// heldBackend holds every call until release closes or the call's
// context ends.
type heldBackend struct{ release chan struct{} }

func (h heldBackend) Dispatch(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	for i := range b.Requests {
		out[i] = batcher.Response{Text: "held"}
	}
	return nil
}

// endingJobs is batchJobs whose Get ends the job after reading it: the
// interleaving in which a batch ends between the cancel handler's read
// and its cancel.
type endingJobs struct {
	batchJobs
	end func(id string)
}

func (e endingJobs) Get(ctx context.Context, id string) (*openaiapi.BatchJob, error) {
	j, err := e.batchJobs.Get(ctx, id)
	if err == nil {
		e.end(id)
	}
	return j, err
}

// TestBatchCancelEndsBetweenReadAndCancel: a batch that ends after the
// cancel handler read it running and before its cancel is answered as
// OpenAI answers an ended batch (400 naming its status), not 200 as if the
// cancel took.
func TestBatchCancelEndsBetweenReadAndCancel(t *testing.T) {
	held := heldBackend{release: make(chan struct{})}
	fast := batcher.BatchConfig{MaxBatchSize: 8, MinBatchSize: 1, Window: time.Millisecond, MaxWait: 5 * time.Millisecond}
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "held", Backend: held, MaxConcurrency: 4}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "held", Batch: fast}),
	)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := jobs.OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := jobs.New(jobs.Config{Store: store, Core: core, DataDir: dir, Exclusive: true,
		CommitInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(held.release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
		if err := core.Shutdown(ctx); err != nil {
			t.Errorf("core shutdown: %v", err)
		}
		if err := store.Close(); err != nil {
			t.Errorf("store close: %v", err)
		}
	})
	fs, err := openaiapi.OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	ctx := t.Context()
	c, err := m.Begin(ctx, jobs.Spec{Model: "chat", Tags: map[string]string{
		"batcher.openai.endpoint": "/v1/chat/completions", "batcher.openai.input_file_id": "file-x"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		in := batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: id}}}
		if err := c.Add(ctx, id, &jobs.ItemRequest{Input: in}); err != nil {
			t.Fatal(err)
		}
	}
	j, err := c.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The job cannot end by itself (its calls are held): it ends here,
	// cancelled by another caller, once the handler has read it.
	var readState jobs.State
	end := func(id string) {
		if readState != jobs.StateUnspecified {
			return
		}
		got, err := m.Get(ctx, id)
		if err != nil {
			t.Error(err)
			return
		}
		readState = got.State
		if _, err := m.Cancel(ctx, id); err != nil {
			t.Error(err)
			return
		}
		if err := m.Watch(ctx, id, 10*time.Millisecond, func(jobs.Progress) error { return nil }); err != nil {
			t.Error(err)
		}
	}
	h := openaiapi.NewBatches(endingJobs{batchJobs{m}, end}, fs)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/batches/"+j.ID+"/cancel", nil))
	if readState.Terminal() || readState == jobs.StateUnspecified {
		t.Fatalf("the handler read the job %v, want it not ended", readState)
	}
	want := "Cannot cancel a batch with status 'cancelled'"
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), want) {
		t.Fatalf("cancel of a batch that ended after the read: %d %s, want 400 %q", w.Code, w.Body, want)
	}
}
