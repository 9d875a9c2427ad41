package anthropic_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/anthropic"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// waitEnded polls the batch until it has ended (as a client of the batch
// API does), within ctx.
func waitEnded(ctx context.Context, t *testing.T, be *anthropic.Backend, id string) *anthropic.MessageBatch {
	t.Helper()
	for {
		m, err := be.GetBatch(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Ended() {
			return m
		}
	}
}

// TestMessageBatchRoundTrip: requests encoded as lines, created as one
// batch on llmsim's /v1/messages/batches, polled to its end, and read back
// by custom id: each answer is the online call's, and a request the
// upstream refuses is an errored line carrying its message.
func TestMessageBatchRoundTrip(t *testing.T) {
	_, url := startSim(t, llmsim.Config{APIKey: "sk-ant-k"})
	be := newBackend(t, anthropic.Config{BaseURL: url, APIKeyEnv: "K", LookupEnv: func(string) (string, bool) { return "sk-ant-k", true }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lines bytes.Buffer
	prompts := map[string]string{"item-1": "Why is the sky blue?", "item-2": "Name a river.", "item-3": "Too hot"}
	for _, id := range []string{"item-1", "item-2", "item-3"} {
		r := userTurn(prompts[id])
		if id == "item-3" {
			hot := float32(1.5)
			r.Params.Temperature = &hot // Anthropic's range is 0..1
		}
		if _, err := be.EncodeBatchRequest(&lines, &anthropic.BatchRequest{CustomID: id, Model: "sim-chat", Req: r, MaxTokens: 32}); err != nil {
			t.Fatal(err)
		}
	}
	seed := int64(1)
	bad := userTurn("x")
	bad.Params.Seed = &seed
	if n, err := be.EncodeBatchRequest(&lines, &anthropic.BatchRequest{CustomID: "bad", Model: "sim-chat", Req: bad}); n != 0 ||
		err == nil || !strings.Contains(err.Error(), "params.seed") {
		t.Errorf("a seed encoded: %d, %v", n, err)
	}
	m, err := be.CreateBatch(ctx, &lines)
	if err != nil {
		t.Fatal(err)
	}
	m = waitEnded(ctx, t, be, m.ID)
	if c := m.RequestCounts; c.Succeeded != 2 || c.Errored != 1 || c.Processing != 0 || m.EndedAt == nil {
		t.Errorf("counts %+v", c)
	}
	got := map[string]*anthropic.BatchResult{}
	if err := be.BatchResults(ctx, m, func(r *anthropic.BatchResult) error { got[r.CustomID] = r; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"item-1", "item-2"} {
		want, _ := llmsim.Reply(prompts[id], 32, llmsim.DefaultReplyTokens)
		r := got[id]
		if r == nil || r.Type != "succeeded" || r.Resp.Err != nil || r.Resp.Text != want || r.Resp.FinishReason != batcher.FinishStop || r.Resp.Usage.PromptTokens == 0 {
			t.Errorf("%s: %+v, want %q", id, r, want)
		}
	}
	if r := got["item-3"]; r == nil || r.Type != "errored" || batcher.ClassOf(r.Resp.Err) != batcher.ClassInvalidRequest ||
		!strings.Contains(r.Resp.Err.Error(), "temperature") {
		t.Errorf("item-3: %+v", r)
	}
	if len(got) != 3 {
		t.Errorf("%d results, want 3", len(got))
	}
}

// TestMessageBatchCancel: a batch cancelled while its first request waits
// upstream ends with every request canceled, each reported.
func TestMessageBatchCancel(t *testing.T) {
	_, url := startSim(t, llmsim.Config{Latency: time.Hour})
	be := newBackend(t, anthropic.Config{BaseURL: url})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lines bytes.Buffer
	for _, id := range []string{"a", "b"} {
		if _, err := be.EncodeBatchRequest(&lines, &anthropic.BatchRequest{CustomID: id, Model: "sim-chat", Req: userTurn(id), MaxTokens: 8}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := be.CreateBatch(ctx, &lines)
	if err != nil {
		t.Fatal(err)
	}
	if m.ProcessingStatus != "in_progress" {
		t.Fatalf("created %+v", m)
	}
	if m, err = be.CancelBatch(ctx, m.ID); err != nil || (m.ProcessingStatus != "canceling" && !m.Ended()) {
		t.Fatalf("cancel: %+v, %v", m, err)
	}
	m = waitEnded(ctx, t, be, m.ID)
	var canceled int
	if err := be.BatchResults(ctx, m, func(r *anthropic.BatchResult) error {
		if r.Type == "canceled" && r.Resp.Err != nil {
			canceled++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if canceled != 2 || m.RequestCounts.Canceled != 2 {
		t.Errorf("%d canceled lines, counts %+v; want 2", canceled, m.RequestCounts)
	}
	if _, err := be.GetBatch(ctx, "msgbatch_nope"); batcher.ClassOf(err) != batcher.ClassNotFound {
		t.Errorf("unknown batch: %v", err)
	}
}

// TestListBatches: ListBatches pages through llmsim's GET
// /v1/messages/batches (newest first, 100 a page) and stops at the first
// batch created before since; Batches.List maps them with their request
// counts.
func TestListBatches(t *testing.T) {
	var mu sync.Mutex
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	_, url := startSim(t, llmsim.Config{BatchTime: time.Hour, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	be := newBackend(t, anthropic.Config{BaseURL: url})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 105
	ids := make([]string, n)
	for i := range n {
		mu.Lock()
		now = t0.Add(time.Duration(i) * time.Second)
		mu.Unlock()
		var lines bytes.Buffer
		for k := range i%3 + 1 {
			if _, err := be.EncodeBatchRequest(&lines, &anthropic.BatchRequest{CustomID: fmt.Sprintf("r%d", k), Model: "sim-chat", Req: userTurn("hi"), MaxTokens: 8}); err != nil {
				t.Fatal(err)
			}
		}
		m, err := be.CreateBatch(ctx, &lines)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = m.ID
	}
	all, err := be.ListBatches(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("%d batches listed, want %d", len(all), n)
	}
	for i, m := range all {
		if want := ids[n-1-i]; m.ID != want {
			t.Fatalf("batch %d listed is %s, want %s (newest first)", i, m.ID, want)
		}
	}
	bs, err := be.Batches().List(ctx, t0.Add(100*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 5 || bs[0].ID != ids[n-1] || bs[4].ID != ids[100] {
		t.Fatalf("since the 101st: %d batches, want the 5 newest", len(bs))
	}
	for i, b := range bs {
		if want := int64((n-1-i)%3 + 1); b.Counts.Total != want || !b.CreatedAt.Equal(t0.Add(time.Duration(n-1-i)*time.Second)) {
			t.Errorf("%s: %d requests created %v, want %d at %v", b.ID, b.Counts.Total, b.CreatedAt, want, t0.Add(time.Duration(n-1-i)*time.Second))
		}
	}
}
