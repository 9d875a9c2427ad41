package openai

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"

	"github.com/batcherhq/batcher/backend/openai/pack"
	"github.com/batcherhq/batcher/batcher"
)

// packEntryTokens is the reply's JSON overhead per packed answer, in
// tokens, added to a pack's max_tokens.
const packEntryTokens = 16

// packPromptTokens is the packed prompt's own overhead, in tokens, counted
// against Pack.MaxTokens.
const packPromptTokens = 100

// chat answers every request of a chat batch: packable requests in packs
// when the route packs, the rest one call each, at most MaxFanOut calls at
// once. It returns when every call has ended.
func (b *Backend) chat(ctx context.Context, seen *limitsSeen, batch *batcher.Batch, out []batcher.Response) {
	f := &fanOut{ctx: ctx, sem: make(chan struct{}, b.cfg.MaxFanOut)}
	var packs [][]int
	singles := make([]int, 0, len(batch.Requests))
	if len(batch.Requests) > 1 && b.packing(ctx, batch.Route) {
		packs, singles = b.plan(batch)
	} else {
		for i := range batch.Requests {
			singles = append(singles, i)
		}
	}
	for _, idx := range packs {
		f.run(func() { b.sendPack(ctx, seen, f, batch, idx, out) }, func(err error) {
			for _, i := range idx {
				out[i] = batcher.Response{Err: err}
			}
		})
	}
	for _, i := range singles {
		f.run(func() { out[i] = b.single(ctx, seen, batch, i) }, func(err error) { out[i] = batcher.Response{Err: err} })
	}
	f.wg.Wait()
}

// fanOut runs a batch's upstream calls, at most cap(sem) at once.
type fanOut struct {
	ctx context.Context
	sem chan struct{}
	wg  sync.WaitGroup
}

// run runs fn in its own goroutine once a slot is free, or calls cancelled
// if ctx ends first. fn may call run again.
func (f *fanOut) run(fn func(), cancelled func(error)) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		select {
		case f.sem <- struct{}{}:
		case <-f.ctx.Done():
			cancelled(transportError(f.ctx, "", f.ctx.Err()))
			return
		}
		defer func() { <-f.sem }()
		fn()
	}()
}

// maxTokensOf returns request i's max_tokens.
func maxTokensOf(batch *batcher.Batch, i int) int32 {
	if mt := batch.Requests[i].Params.MaxTokens; mt > 0 {
		return mt
	}
	return batch.MaxTokens
}

// newChatRequest builds one chat call with request i's generation
// parameters: its own on a fan-out route, where requests with different
// parameters share a batch (SharedParams), the batch's shared ones on a
// packing route, where i is the pack's first request.
func (b *Backend) newChatRequest(batch *batcher.Batch, i int, msgs []wireMessage, maxTokens int32) chatRequest {
	req := chatRequest{Model: batch.Model, Messages: msgs}
	if b.cfg.MaxTokensField == "max_completion_tokens" {
		req.MaxCompletionTokens = maxTokens
	} else {
		req.MaxTokens = maxTokens
	}
	setParams(&req.Temperature, &req.TopP, &req.Stop, &req.Seed, &batch.Requests[i].Params)
	if r := batch.Requests[i]; r.Rich() {
		setRich(&req, r) // richchat.go
	}
	return req
}

// single sends request i alone.
func (b *Backend) single(ctx context.Context, seen *limitsSeen, batch *batcher.Batch, i int) batcher.Response {
	r := batch.Requests[i]
	msgs := wireMessages(r.Input.Messages)
	var resp chatResponse
	if err := b.post(ctx, seen, batch, 1, "/chat/completions", b.newChatRequest(batch, i, msgs, maxTokensOf(batch, i)), &resp); err != nil {
		return batcher.Response{Err: err}
	}
	if r.Rich() {
		return b.richAnswer(&resp, r, b.cfg.endpointPath("/chat/completions")) // richchat.go
	}
	text, fr, err := chatAnswer(&resp, b.cfg.endpointPath("/chat/completions"))
	if err != nil {
		return batcher.Response{Err: err}
	}
	return batcher.Response{Text: text, FinishReason: fr, Usage: clampUsage(usageOf(resp.Usage))}
}

// chatAnswer reads the reply of a chat call to the endpoint ep.
func chatAnswer(resp *chatResponse, ep string) (string, batcher.FinishReason, error) {
	if len(resp.Choices) == 0 {
		return "", 0, invalidResponse(200, ep, "no choices", nil)
	}
	c := &resp.Choices[0]
	for k := range resp.Choices {
		if resp.Choices[k].Index == 0 {
			c = &resp.Choices[k]
			break
		}
	}
	switch {
	case c.Message.Content != nil:
		return *c.Message.Content, finishReason(c.FinishReason), nil
	case c.Message.Refusal != nil:
		return *c.Message.Refusal, batcher.FinishContentFilter, nil
	}
	return "", 0, invalidResponse(200, ep, "no content", nil)
}

// packable reports whether request r may go in a pack, and returns its
// shared system prompt and its user turn: any system or developer messages,
// then exactly one user message, and no stop sequences. A request with
// anything beyond text (tools, a response format, images, parameters a
// pack cannot state per item) never packs: it goes as its own call.
func packable(r *batcher.Request) (system, user string, ok bool) {
	if len(r.Params.Stop) > 0 || r.Rich() {
		return "", "", false
	}
	msgs := r.Input.Messages
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" {
		return "", "", false
	}
	var sys []string
	for _, m := range msgs[:len(msgs)-1] {
		if m.Role != "system" && m.Role != "developer" {
			return "", "", false
		}
		sys = append(sys, m.Content)
	}
	return strings.Join(sys, "\n\n"), msgs[len(msgs)-1].Content, true
}

// estimate guesses a text's tokens as the core does: four bytes a token.
func estimate(s string) int { return len(s)/4 + 1 }

// plan splits a chat batch into packs (each of 2 or more requests sharing a
// system prompt, within Pack.MaxItems and Pack.MaxTokens) and singles.
func (b *Backend) plan(batch *batcher.Batch) (packs [][]int, singles []int) {
	type group struct {
		system string
		idx    []int
	}
	var groups []*group
	bySystem := map[string]*group{}
	for i, r := range batch.Requests {
		system, user, ok := packable(r)
		if !ok || estimate(user)+int(maxTokensOf(batch, i)) > b.cfg.Pack.MaxTokens {
			singles = append(singles, i)
			continue
		}
		g := bySystem[system]
		if g == nil {
			g = &group{system: system}
			bySystem[system] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	for _, g := range groups {
		base := packPromptTokens + estimate(g.system)
		var cur []int
		tokens := base
		flush := func() {
			if len(cur) > 1 {
				packs = append(packs, cur)
			} else {
				singles = append(singles, cur...)
			}
			cur, tokens = nil, base
		}
		for _, i := range g.idx {
			_, user, _ := packable(batch.Requests[i])
			t := estimate(user) + int(maxTokensOf(batch, i)) + packEntryTokens
			if len(cur) > 0 && (len(cur) == b.cfg.Pack.MaxItems || tokens+t > b.cfg.Pack.MaxTokens) {
				flush()
			}
			cur = append(cur, i)
			tokens += t
		}
		flush()
	}
	return packs, singles
}

// sendPack sends the requests idx as one packed call and routes the answers
// back. Requests the reply fails to answer well are re-sent singly, and so
// are all of them when the pack fails for any other reason than a rate
// limit (an upstream that serves single calls may choke on packs: its 500s
// must not reach the core's breaker while singles would be answered). A
// 429, or the end of the batch's own context, fails the pack's requests
// with its error: the core's budget and retry handle a rate limit, which
// never counts against the breaker. A pack
// that fails as a whole counts towards pausing the route's packing
// (packing.go).
func (b *Backend) sendPack(ctx context.Context, seen *limitsSeen, f *fanOut, batch *batcher.Batch, idx []int, out []batcher.Response) {
	n := len(idx)
	items := make([]string, n)
	promptW := make([]int, n)
	var system string
	for k, i := range idx {
		system, items[k], _ = packable(batch.Requests[i])
		promptW[k] = len(items[k])
	}
	// Requests of one batch share max_tokens; the pack states it per item.
	maxTokens := maxTokensOf(batch, idx[0])
	resend := func(k int, u batcher.Usage) {
		i := idx[k]
		b.st.resent.Add(1)
		f.run(func() {
			r := b.single(ctx, seen, batch, i)
			if r.Err == nil {
				r.Usage.PromptTokens += u.PromptTokens
				r.Usage.CompletionTokens += u.CompletionTokens
			}
			out[i] = r
		}, func(err error) { out[i] = batcher.Response{Err: err} })
	}
	resendAll := func() {
		for k := range idx {
			resend(k, batcher.Usage{})
		}
	}

	p, err := pack.Build(system, items, int(maxTokens))
	if err != nil {
		resendAll()
		return
	}
	req := b.newChatRequest(batch, idx[0], []wireMessage{{Role: "system", Content: p.System}, {Role: "user", Content: p.User}},
		int32(min(int64(n)*(int64(maxTokens)+packEntryTokens)+packEntryTokens, math.MaxInt32)))
	req.ResponseFormat = b.responseFormat()
	b.st.packs.Add(1)
	b.st.packedItems.Add(int64(n))
	var resp chatResponse
	if err := b.post(ctx, seen, batch, n, "/chat/completions", req, &resp); err != nil {
		// No time left to re-send in; or a rate limit, which is not the
		// pack's fault, does not count against the breaker, and would only
		// be multiplied by single calls against the exhausted budget.
		if ctx.Err() != nil || batcher.ClassOf(err) == batcher.ClassRateLimit {
			for _, i := range idx {
				out[i] = batcher.Response{Err: err}
			}
			return
		}
		b.packFailed(ctx, batch.Route, n, err)
		resendAll()
		return
	}
	text, _, err := chatAnswer(&resp, b.cfg.endpointPath("/chat/completions"))
	if err != nil {
		b.packFailed(ctx, batch.Route, n, err)
		resendAll()
		return
	}
	answers, err := pack.Parse(text, n)
	if err != nil {
		b.packFailed(ctx, batch.Route, n, err)
		answers = make([]pack.Answer, n)
		for k := range answers {
			answers[k].Err = err
		}
	} else {
		b.packAnswered(batch.Route)
	}
	complW := make([]int, n)
	for k, a := range answers {
		if a.Err == nil {
			complW[k] = len(a.Text)
		}
	}
	prompt, completion := usageOf(resp.Usage)
	ps, cs := split(prompt, promptW), split(completion, complW)
	for k, a := range answers {
		u := batcher.Usage{PromptTokens: ps[k], CompletionTokens: cs[k]}
		if a.Err != nil {
			resend(k, u)
			continue
		}
		out[idx[k]] = batcher.Response{Text: a.Text, FinishReason: batcher.FinishStop, Usage: u}
	}
}

// responseFormat is the packed call's response_format.
func (b *Backend) responseFormat() json.RawMessage {
	switch b.cfg.Pack.ResponseFormat {
	case FormatJSONSchema:
		return json.RawMessage(`{"type":"json_schema","json_schema":` + string(pack.Schema()) + `}`)
	case FormatJSONObject:
		return json.RawMessage(`{"type":"json_object"}`)
	}
	return nil
}
