package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// BatchTarget is a provider batch API under test.
type BatchTarget struct {
	// New returns the batch API talking to the llmsim served at baseURL
	// (without any path), closed when the test ends.
	New func(t testing.TB, baseURL string) batchapi.Upstream
}

// RunBatch runs the batched half of the contract against target:
//   - a round trip: requests encoded, submitted (uploaded first where the
//     provider takes files), polled to their end and read back by custom
//     id, each once, with the online call's answer (a tool call where a
//     tool is named);
//   - failed and expired lines (llmsim's BatchFailRate and
//     BatchExpireRate): every custom id still comes back exactly once,
//     as a success, a failure with its error, or expired.
func RunBatch(t *testing.T, target BatchTarget) {
	t.Run("RoundTrip", func(t *testing.T) { testBatchRoundTrip(t, target) })
	t.Run("FailedAndExpired", func(t *testing.T) { testBatchFailedAndExpired(t, target) })
}

func startBatch(t *testing.T, target BatchTarget, cfg llmsim.Config) batchapi.Upstream {
	t.Helper()
	sim, err := llmsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() {
		sim.Close()
		ts.Close()
	})
	return target.New(t, ts.URL)
}

// submit encodes reqs under their custom ids, submits them as one batch,
// polls it to its end, and returns its results by custom id (failing the
// test on a custom id seen twice).
func submit(ctx context.Context, t *testing.T, u batchapi.Upstream, ids []string, reqs []*batcher.Request) (*batchapi.Batch, map[string]*batchapi.Result) {
	t.Helper()
	var in bytes.Buffer
	enc := u.NewEncoder(&in)
	for i, r := range reqs {
		if _, err := enc.Encode(&batchapi.Request{CustomID: ids[i], Model: Model, Req: r, MaxTokens: 32}); err != nil {
			t.Fatalf("encode %s: %v", ids[i], err)
		}
	}
	cr := &batchapi.CreateRequest{Endpoint: batchapi.Endpoint(batcher.OpChat)}
	if u.Limits().Files {
		f, err := u.Upload(ctx, "contract.jsonl", &in, int64(in.Len()))
		if err != nil {
			t.Fatal(err)
		}
		cr.InputFileID = f.ID
	} else {
		cr.Input = &in
	}
	b, err := u.Create(ctx, cr)
	if err != nil {
		t.Fatal(err)
	}
	for !b.Status.Terminal() { // poll as a client does, within ctx
		if b, err = u.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]*batchapi.Result{}
	if err := u.Results(ctx, b, func(r *batchapi.Result) error {
		if got[r.CustomID] != nil {
			t.Errorf("custom id %s came back twice", r.CustomID)
		}
		c := *r
		got[r.CustomID] = &c
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b, got
}

func testBatchRoundTrip(t *testing.T, target BatchTarget) {
	u := startBatch(t, target, llmsim.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 20
	ids := make([]string, n)
	reqs := make([]*batcher.Request, n)
	for i := range reqs {
		ids[i] = fmt.Sprintf("item-%d", i)
		reqs[i] = chat(fmt.Sprintf("Batched question %d?", i), "Be brief.")
	}
	reqs[n-1].MutableChat().Tools = []batcher.Tool{weather}
	reqs[n-1].MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"}
	b, got := submit(ctx, t, u, ids, reqs)
	if b.Status != batchapi.StatusCompleted || b.Counts.Completed != n {
		t.Errorf("batch ended %s with counts %+v; want completed, %d", b.Status, b.Counts, n)
	}
	for i, id := range ids {
		r := got[id]
		if r == nil || r.Outcome != batchapi.Succeeded || r.Resp.Err != nil {
			t.Errorf("%s: %+v", id, r)
			continue
		}
		if i == n-1 {
			if len(r.Resp.ChatOutput().ToolCalls) != 1 || r.Resp.ChatOutput().ToolCalls[0].Name != "get_weather" || r.Resp.FinishReason != batcher.FinishToolCalls {
				t.Errorf("%s: %+v, want a get_weather call", id, r.Resp)
			}
			continue
		}
		want, _ := llmsim.Reply(reqs[i].Input.Messages[1].Content, 32, llmsim.DefaultReplyTokens)
		if r.Resp.Text != want || r.Resp.Usage.PromptTokens == 0 || r.Resp.Usage.CompletionTokens == 0 {
			t.Errorf("%s: %q %+v, want %q", id, r.Resp.Text, r.Resp.Usage, want)
		}
	}
	if len(got) != n {
		t.Errorf("%d results, want %d", len(got), n)
	}
}

func testBatchFailedAndExpired(t *testing.T, target BatchTarget) {
	u := startBatch(t, target, llmsim.Config{BatchFailRate: 0.2, BatchExpireRate: 0.2, Seed: 7})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 60
	ids := make([]string, n)
	reqs := make([]*batcher.Request, n)
	for i := range reqs {
		ids[i] = fmt.Sprintf("line-%d", i)
		reqs[i] = chat(fmt.Sprintf("Line %d?", i))
	}
	_, got := submit(ctx, t, u, ids, reqs)
	count := map[batchapi.Outcome]int{}
	for _, id := range ids {
		r := got[id]
		if r == nil {
			// A line an expired batch never ran may be in no file: the
			// caller knows its input (batchapi.Upstream.Results).
			count[batchapi.Expired]++
			continue
		}
		count[r.Outcome]++
		if (r.Outcome == batchapi.Succeeded) != (r.Resp.Err == nil) {
			t.Errorf("%s: outcome %v with error %v", id, r.Outcome, r.Resp.Err)
		}
	}
	if count[batchapi.Succeeded] == 0 || count[batchapi.Failed] == 0 || count[batchapi.Expired] == 0 ||
		count[batchapi.Succeeded]+count[batchapi.Failed]+count[batchapi.Expired] != n {
		t.Errorf("outcomes %v over %d lines; want some of each, every line once", count, n)
	}
}
