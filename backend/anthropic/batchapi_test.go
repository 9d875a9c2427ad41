package anthropic_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/anthropic"
	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// TestBatchAPIUpstream drives Anthropic's Message Batches through
// batchapi.Upstream, as the jobs' batch dispatch does: encode, create
// (no upload), poll, results by custom id; every custom id comes back
// exactly once.
func TestBatchAPIUpstream(t *testing.T) {
	_, url := startSim(t, llmsim.Config{})
	var u batchapi.Upstream = newBackend(t, anthropic.Config{BaseURL: url}).Batches()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if l := u.Limits(); l.MaxRequests != 100_000 || l.MaxBytes != 256<<20 || l.Files || l.Tagged {
		t.Errorf("limits %+v", l)
	}
	if _, err := u.Upload(ctx, "x", nil, 0); !errors.Is(err, batchapi.ErrUnsupported) {
		t.Errorf("upload: %v", err)
	}
	var in bytes.Buffer
	enc := u.NewEncoder(&in)
	const n = 50
	for i := range n {
		if _, err := enc.Encode(&batchapi.Request{CustomID: "item-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Model: "sim-chat",
			Req: userTurn("question " + string(rune('a'+i%26))), MaxTokens: 16}); err != nil {
			t.Fatal(err)
		}
	}
	emb := &batcher.Request{Input: batcher.Input{Op: batcher.OpEmbedding, Text: "x"}}
	if _, err := enc.Encode(&batchapi.Request{CustomID: "e", Model: "m", Req: emb}); !errors.Is(err, batchapi.ErrUnsupported) {
		t.Errorf("an embedding encoded: %v", err)
	}
	if _, err := enc.Encode(&batchapi.Request{CustomID: "no spaces", Model: "m", Req: userTurn("x")}); !errors.Is(err, batcher.ErrInvalid) {
		t.Errorf("a bad custom id encoded: %v", err)
	}
	b, err := u.Create(ctx, &batchapi.CreateRequest{Input: &in, Endpoint: batchapi.Endpoint(batcher.OpChat)})
	if err != nil {
		t.Fatal(err)
	}
	for !b.Status.Terminal() {
		if b, err = u.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if b.Status != batchapi.StatusCompleted || b.Counts.Total != n || b.Counts.Completed != n {
		t.Errorf("batch %+v", b)
	}
	seen := map[string]int{}
	if err := u.Results(ctx, b, func(r *batchapi.Result) error {
		seen[r.CustomID]++
		if r.Outcome != batchapi.Succeeded || r.Resp.Text == "" {
			t.Errorf("%s: %+v", r.CustomID, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Errorf("%d custom ids back, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s came back %d times", id, k)
		}
	}
	if _, err := u.Get(ctx, "msgbatch_nope"); !errors.Is(err, batchapi.ErrNotFound) {
		t.Errorf("unknown batch: %v", err)
	}
}
