package openai_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// simClock is a settable clock for llmsim's batch API.
type simClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *simClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *simClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// encodeInput encodes n chat requests as an input file.
func encodeInput(t *testing.T, u batchapi.Upstream, n int) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	enc := u.NewEncoder(&buf)
	for i := range n {
		r := &batchapi.Request{CustomID: fmt.Sprintf("req-%d", i), Model: "sim-chat", MaxTokens: 16,
			Req: &batcher.Request{Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: fmt.Sprintf("question %d", i)}}}}}
		if _, err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	return &buf
}

// TestBatchesLifecycle takes one batch through upload, create, poll,
// results and the lookups that find lost ids, against llmsim.
func TestBatchesLifecycle(t *testing.T) {
	clk := &simClock{t: time.Now()}
	sim, url := startSim(t, llmsim.Config{BatchTime: time.Hour, BatchFailRate: 0.1, Now: clk.now, Seed: 3})
	u := newBackend(t, openai.Config{BaseURL: url}).Batches()
	ctx := context.Background()
	in := encodeInput(t, u, 200)
	size := int64(in.Len())
	f, err := u.Upload(ctx, "job-1.chunk-0.jsonl", in, size)
	if err != nil {
		t.Fatal(err)
	}
	if f.Bytes != size || f.Name != "job-1.chunk-0.jsonl" {
		t.Fatalf("file = %+v, want %d bytes", f, size)
	}
	if got, err := u.FindFile(ctx, "job-1.chunk-0.jsonl"); err != nil || got.ID != f.ID {
		t.Fatalf("FindFile = %+v, %v; want %s", got, err, f.ID)
	}
	if _, err := u.FindFile(ctx, "other"); !errors.Is(err, batchapi.ErrNotFound) {
		t.Fatalf("FindFile(other) = %v, want ErrNotFound", err)
	}
	tags := map[string]string{"batcher_job_id": "job-1", "batcher_chunk": "0"}
	b, err := u.Create(ctx, &batchapi.CreateRequest{InputFileID: f.ID, Endpoint: "/v1/chat/completions", Metadata: tags})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != batchapi.StatusInProgress || b.Counts.Total != 200 {
		t.Fatalf("created %+v", b)
	}
	if got, err := u.Find(ctx, map[string]string{"batcher_job_id": "job-1"}, 48*time.Hour); err != nil || got.ID != b.ID {
		t.Fatalf("Find = %+v, %v; want %s", got, err, b.ID)
	}
	if _, err := u.Find(ctx, map[string]string{"batcher_job_id": "job-2"}, 48*time.Hour); !errors.Is(err, batchapi.ErrNotFound) {
		t.Fatalf("Find(job-2) = %v, want ErrNotFound", err)
	}
	clk.add(30 * time.Minute)
	b, err = u.Get(ctx, b.ID)
	if err != nil || b.Status != batchapi.StatusInProgress || b.Counts.Completed != 100 {
		t.Fatalf("half way: %+v, %v", b, err)
	}
	if eta := b.ETA(clk.now()).Sub(clk.now()); eta < 29*time.Minute || eta > 31*time.Minute { // times are in seconds
		t.Fatalf("ETA in %v, want 30m", eta)
	}
	clk.add(31 * time.Minute)
	if b, err = u.Get(ctx, b.ID); err != nil || b.Status != batchapi.StatusCompleted {
		t.Fatalf("at the end: %+v, %v", b, err)
	}
	seen := map[string]batchapi.Outcome{}
	err = u.Results(ctx, b, func(r *batchapi.Result) error {
		if _, dup := seen[r.CustomID]; dup {
			t.Errorf("%s twice", r.CustomID)
		}
		seen[r.CustomID] = r.Outcome
		if r.Outcome == batchapi.Succeeded && (r.Resp.Text == "" || r.Resp.Usage.PromptTokens == 0) {
			t.Errorf("%s: empty answer %+v", r.CustomID, r.Resp)
		}
		if r.Outcome == batchapi.Failed && r.Resp.Err == nil {
			t.Errorf("%s: failed without an error", r.CustomID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, o := range seen {
		if o == batchapi.Failed {
			failed++
		}
	}
	if len(seen) != 200 || failed == 0 || failed > 50 || int64(failed) != b.Counts.Failed {
		t.Fatalf("%d lines, %d failed (batch says %d)", len(seen), failed, b.Counts.Failed)
	}
	st := sim.BatchStats()
	if st.FilesUploaded != 1 || st.BatchesCreated != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBatchesCancelAndExpire: a cancelled batch reports its unrun lines
// cancelled; expired lines come back as Expired.
func TestBatchesCancelAndExpire(t *testing.T) {
	clk := &simClock{t: time.Now()}
	_, url := startSim(t, llmsim.Config{BatchTime: time.Hour, BatchExpireRate: 0.2, Now: clk.now, Seed: 5})
	u := newBackend(t, openai.Config{BaseURL: url}).Batches()
	ctx := context.Background()
	run := func() *batchapi.Batch {
		in := encodeInput(t, u, 100)
		f, err := u.Upload(ctx, "in.jsonl", in, int64(in.Len()))
		if err != nil {
			t.Fatal(err)
		}
		b, err := u.Create(ctx, &batchapi.CreateRequest{InputFileID: f.ID, Endpoint: "/v1/chat/completions"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	count := func(b *batchapi.Batch) map[batchapi.Outcome]int {
		n := map[batchapi.Outcome]int{}
		if err := u.Results(ctx, b, func(r *batchapi.Result) error { n[r.Outcome]++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := run()
	clk.add(15 * time.Minute)
	if c, err := u.Cancel(ctx, a.ID); err != nil || c.Status != batchapi.StatusCancelled {
		t.Fatalf("cancel: %+v, %v", c, err)
	}
	a, _ = u.Get(ctx, a.ID)
	n := count(a)
	if n[batchapi.Cancelled] != 75 || n[batchapi.Cancelled]+n[batchapi.Succeeded]+n[batchapi.Expired] != 100 {
		t.Fatalf("cancelled batch: %v", n)
	}
	b := run()
	clk.add(2 * time.Hour)
	b, _ = u.Get(ctx, b.ID)
	n = count(b)
	if b.Status != batchapi.StatusExpired || n[batchapi.Expired] == 0 || n[batchapi.Expired]+n[batchapi.Succeeded] != 100 {
		t.Fatalf("expired batch %s: %v", b.Status, n)
	}
}

// TestBatchesLimits: llmsim enforces the file limits; a batch over more
// lines than allowed fails naming the limit.
func TestBatchesLimits(t *testing.T) {
	_, url := startSim(t, llmsim.Config{BatchMaxRequests: 10, BatchMaxFileBytes: 4096})
	u := newBackend(t, openai.Config{BaseURL: url}).Batches()
	ctx := context.Background()
	in := encodeInput(t, u, 100) // over 4096 bytes
	if _, err := u.Upload(ctx, "big.jsonl", in, int64(in.Len())); err == nil {
		t.Fatal("an upload over the file limit succeeded")
	}
	in = encodeInput(t, u, 11)
	f, err := u.Upload(ctx, "eleven.jsonl", in, int64(in.Len()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := u.Create(ctx, &batchapi.CreateRequest{InputFileID: f.ID, Endpoint: "/v1/chat/completions"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != batchapi.StatusFailed || !bytes.Contains([]byte(b.Errors), []byte("maximum of 10")) {
		t.Fatalf("batch over the request limit: %s %q", b.Status, b.Errors)
	}
	if _, err := u.Upload(ctx, "huge", bytes.NewReader(nil), openai.BatchMaxBytes+1); !errors.Is(err, batchapi.ErrTooLarge) {
		t.Fatalf("upload over 200 MB: %v, want ErrTooLarge", err)
	}
}

func FuzzBatchLine(f *testing.F) {
	f.Add([]byte(`{"id":"x","custom_id":"a","response":{"status_code":200,"body":{"object":"chat.completion","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}}}`))
	f.Add([]byte(`{"custom_id":"b","response":{"status_code":500,"body":{"error":{"message":"boom"}}}}`))
	f.Add([]byte(`{"custom_id":"c","error":{"code":"batch_expired","message":"late"}}`))
	f.Add([]byte(`{"custom_id":"d","response":{"status_code":200,"body":{"object":"list","data":[{"embedding":[1,2]}]}}}`))
	f.Add([]byte(`{"custom_id":"e","response":{"status_code":200,"body":{"object":"text_completion","choices":[{"text":"t"}]}}}`))
	f.Add([]byte(`nope`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := openai.ParseBatchLine(line)
		if err != nil {
			if r != nil {
				t.Fatal("a result with an error")
			}
			return
		}
		if r.CustomID == "" {
			t.Fatal("a result without a custom id")
		}
		if (r.Outcome == batchapi.Succeeded) != (r.Resp.Err == nil) {
			t.Fatalf("outcome %v with error %v", r.Outcome, r.Resp.Err)
		}
	})
}
