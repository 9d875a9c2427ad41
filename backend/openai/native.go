package openai

import (
	"context"
	"fmt"
	"strconv"

	"github.com/batcherhq/batcher/batcher"
)

// embed sends the batch as one /embeddings call whose input array holds
// every request's text; data[].index routes each vector back.
func (b *Backend) embed(ctx context.Context, seen *limitsSeen, batch *batcher.Batch, out []batcher.Response) error {
	n := len(batch.Requests)
	inputs := make([]string, n)
	weights := make([]int, n)
	for i, r := range batch.Requests {
		inputs[i] = r.Input.Text
		weights[i] = len(r.Input.Text)
	}
	var resp embeddingResponse
	if err := b.post(ctx, seen, batch, n, "/embeddings", embeddingRequest{Model: batch.Model, Input: inputs, EncodingFormat: "float"}, &resp); err != nil {
		return err
	}
	positional := len(resp.Data) == n
	for _, d := range resp.Data {
		positional = positional && d.Index == nil
	}
	r := newRouter(n)
	for k, d := range resp.Data {
		i := k
		if !positional {
			if d.Index == nil {
				continue
			}
			i = *d.Index
		}
		if r.claim(i) && len(d.Embedding) > 0 {
			out[i].Embedding = d.Embedding
		}
	}
	prompt, _ := usageOf(resp.Usage)
	shares := split(prompt, weights)
	return r.finish(out, batch, b.cfg.endpointPath("/embeddings"), "embedding", func(i int) {
		out[i].Usage = batcher.Usage{PromptTokens: shares[i]}
	}, func(i int) bool { return out[i].Embedding != nil })
}

// complete sends the batch as one /completions call whose prompt array
// holds every request's prompt; choices[].index routes each text back.
func (b *Backend) complete(ctx context.Context, seen *limitsSeen, batch *batcher.Batch, out []batcher.Response) error {
	n := len(batch.Requests)
	req := completionRequest{Model: batch.Model, Prompt: make([]string, n), MaxTokens: batch.MaxTokens}
	setParams(&req.Temperature, &req.TopP, &req.Stop, &req.Seed, &batch.Requests[0].Params)
	promptW := make([]int, n)
	for i, r := range batch.Requests {
		req.Prompt[i] = r.Input.Prompt
		promptW[i] = len(r.Input.Prompt)
	}
	var resp completionResponse
	if err := b.post(ctx, seen, batch, n, "/completions", req, &resp); err != nil {
		return err
	}
	positional := len(resp.Choices) == n
	for _, c := range resp.Choices {
		positional = positional && c.Index == nil
	}
	r := newRouter(n)
	texts := make([]*string, n)
	for k, c := range resp.Choices {
		i := k
		if !positional {
			if c.Index == nil {
				continue
			}
			i = *c.Index
		}
		if r.claim(i) && c.Text != nil {
			texts[i] = c.Text
			out[i].Text = *c.Text
			out[i].FinishReason = finishReason(c.FinishReason)
		}
	}
	complW := make([]int, n)
	for i := range texts {
		if texts[i] != nil {
			complW[i] = len(*texts[i])
		}
	}
	prompt, completion := usageOf(resp.Usage)
	ps, cs := split(prompt, promptW), split(completion, complW)
	return r.finish(out, batch, b.cfg.endpointPath("/completions"), "completion", func(i int) {
		out[i].Usage = batcher.Usage{PromptTokens: ps[i], CompletionTokens: cs[i]}
	}, func(i int) bool { return texts[i] != nil })
}

// router tracks which requests of a native batch an answer routed back to.
type router struct {
	seen []int // how many entries named each request
}

func newRouter(n int) *router { return &router{seen: make([]int, n)} }

// claim books an entry for request i and reports whether i is in range.
func (r *router) claim(i int) bool {
	if i < 0 || i >= len(r.seen) {
		return false
	}
	r.seen[i]++
	return true
}

// finish gives each answered request its usage and fails the others: no
// entry, an empty one, or two entries for one request. It returns an error
// when no request got an answer.
// Messages name the request by its id, not by its place in the batch.
func (r *router) finish(out []batcher.Response, batch *batcher.Batch, ep, what string, setUsage func(int), ok func(int) bool) error {
	answered := 0
	for i, seen := range r.seen {
		var msg string
		switch {
		case seen > 1:
			msg = fmt.Sprintf("%s for request %s more than once", what, requestName(batch, i))
		case seen == 0:
			msg = fmt.Sprintf("no %s for request %s", what, requestName(batch, i))
		case !ok(i):
			msg = fmt.Sprintf("an empty %s for request %s", what, requestName(batch, i))
		}
		if msg != "" {
			out[i] = batcher.Response{Err: invalidResponse(200, ep, msg, nil)}
			continue
		}
		answered++
		setUsage(i)
	}
	if answered == 0 {
		return out[0].Err
	}
	return nil
}

// requestName names request i of batch in a message: its id, quoted and
// cut short.
func requestName(batch *batcher.Batch, i int) string {
	id := batch.Requests[i].ID
	if len(id) > 64 {
		id = id[:64] + "..."
	}
	return strconv.Quote(id)
}

// setParams copies generation parameters into a call: a request's own, or,
// for a call that carries the whole batch, its first request's, which the
// core makes equal across the batch (SharedParams).
func setParams(temp, topP **float32, stop *[]string, seed **int64, p *batcher.Params) {
	*temp, *topP, *seed = p.Temperature, p.TopP, p.Seed
	if len(p.Stop) > 0 {
		*stop = p.Stop
	}
}
