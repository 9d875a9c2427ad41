package sim_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// A direct call, as a client without a batcher makes it.
func ExampleProvider_Call() {
	p, err := sim.New(sim.Config{})
	if err != nil {
		panic(err)
	}
	r, err := p.Call(context.Background(), "sim-chat",
		batcher.Input{Op: batcher.OpCompletion, Prompt: "Say hello to the batcher"},
		batcher.Params{MaxTokens: 8})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Text)
	fmt.Println(r.FinishReason == batcher.FinishLength, r.Usage.PromptTokens, r.Usage.CompletionTokens)
	// Output:
	// Say hello to the batcher two seven paper
	// true 7 8
}

// A native batch is one upstream call: it counts as one request against the
// provider's RPM and as the sum of its tokens against its TPM.
func ExampleProvider_Dispatch() {
	p, err := sim.New(sim.Config{Dimensions: 4, RPM: 60, RPMBurst: 1})
	if err != nil {
		panic(err)
	}
	b := &batcher.Batch{Model: "sim-embed", Op: batcher.OpEmbedding, Requests: []*batcher.Request{
		{Input: batcher.Input{Op: batcher.OpEmbedding, Text: "first"}},
		{Input: batcher.Input{Op: batcher.OpEmbedding, Text: "second"}},
	}}
	out := make([]batcher.Response, len(b.Requests))
	if err := p.Dispatch(context.Background(), b, out); err != nil {
		panic(err)
	}
	fmt.Println(len(out[0].Embedding), len(out[1].Embedding))

	// The bucket is empty now: the next call is answered 429.
	err = p.Dispatch(context.Background(), b, out)
	var ue *batcher.UpstreamError
	if errors.As(err, &ue) {
		fmt.Println(ue.StatusCode, ue.Class, ue.RateLimit.RetryAfter.Round(100*time.Millisecond))
	}
	s := p.Stats()
	fmt.Println(s.Calls, s.Items, s.RateLimited)
	// Output:
	// 4 4
	// 429 rate_limit 1s
	// 2 4 1
}
