package openaiapi

import (
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// completions serves POST /v1/completions. A prompt array is split into
// requests that batch with other callers', answered as choices in order.
func (h *Handler) completions(w http.ResponseWriter, r *http.Request) {
	var body completionRequest
	e := decodeKnown(w, r, &body, knownCompletionFields(), h.cfg.maxBody, h.cfg.maxDepth, "/v1/completions")
	if e == nil {
		e = streamOptionsSet(body.Stream, body.StreamOptions)
	}
	if e != nil {
		WriteError(w, e)
		return
	}
	id, reqs, e := h.completionRequests(r, &body)
	if e != nil {
		WriteError(w, e)
		return
	}
	if body.Stream && len(reqs) == 1 {
		// One prompt streams its deltas (stream.go); several are batched
		// and sent as whole answers, one chunk each, in order.
		h.streamCompletion(w, r, reqs[0], &body, id)
		return
	}
	res, err := h.run(r.Context(), reqs, body.Prompt.array, priorityParam(r, body.ServiceTier))
	if err != nil {
		WriteError(w, ErrorFrom(err, "prompt"))
		return
	}
	if len(res) == 1 {
		setResultHeaders(w, id, &res[0])
	} else {
		w.Header().Set("X-Request-Id", id)
	}
	resp := completion{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: body.Model}
	var total batcher.Usage
	for i := range res {
		total.PromptTokens += res[i].Usage.PromptTokens
		total.CompletionTokens += res[i].Usage.CompletionTokens
	}
	if !body.Stream {
		resp.Choices = make([]completionChoice, len(res))
		for i := range res {
			text := res[i].Text
			if body.Echo {
				text = reqs[i].Input.Prompt + text
			}
			resp.Choices[i] = completionChoice{Index: i, Text: text, FinishReason: finishReason(res[i].FinishReason)}
		}
		resp.Usage = usageOf(total)
		writeJSON(w, &resp)
		return
	}
	sse := startSSE(w)
	for i := range res {
		text := res[i].Text
		if body.Echo {
			text = reqs[i].Input.Prompt + text
		}
		resp.Choices = []completionChoice{{Index: i, Text: text}}
		sse.event(&resp)
		resp.Choices = []completionChoice{{Index: i, FinishReason: finishReason(res[i].FinishReason)}}
		sse.event(&resp)
	}
	if body.StreamOptions != nil && body.StreamOptions.IncludeUsage {
		resp.Choices = []completionChoice{}
		resp.Usage = usageOf(total)
		sse.event(&resp)
	}
	sse.done()
}

var knownCompletionFields = sync.OnceValue(func() map[string]bool { return jsonFields(reflect.TypeFor[completionRequest]()) })

// completionRequests translates a completions body into one core request
// per prompt.
func (h *Handler) completionRequests(r *http.Request, body *completionRequest) (string, []*batcher.Request, *Error) {
	o, e := h.options(r, body.ServiceTier)
	if e != nil {
		return "", nil, e
	}
	if body.Model == "" {
		return "", nil, badRequest("model", "must be set")
	}
	reqs, e := completionToCore(body, h.cfg.maxInputs)
	if e != nil {
		return "", nil, e
	}
	id := h.newID("cmpl-")
	o.stamp(id, reqs...)
	return id, reqs, nil
}

// completionToCore translates a completions body into one core request
// per prompt, at most maxInputs, without the caller's options (id,
// priority, timeout, cache mode), which its door sets: the HTTP headers
// here, a batch job's spec for a batch line (CompletionBody).
func completionToCore(body *completionRequest, maxInputs int) ([]*batcher.Request, *Error) {
	if e := checkInputs("prompt", &body.Prompt, maxInputs); e != nil {
		return nil, e
	}
	if body.Suffix != nil && *body.Suffix != "" {
		return nil, badRequest("suffix", "is not served: Batcher completes prompts only")
	}
	if e := checkMetadata(body.Metadata); e != nil {
		return nil, e
	}
	g := genParams{temperature: body.Temperature, topP: body.TopP, stop: body.Stop, seed: body.Seed}
	var e *Error
	if g.maxTokens, g.maxParam, e = pickMaxTokens(body.MaxTokens, body.MaxCompletionTokens); e != nil {
		return nil, e
	}
	params, e := g.toCore()
	if e != nil {
		return nil, e
	}
	n, e := choices(body.N)
	if e != nil {
		return nil, e
	}
	reqs := make([]*batcher.Request, len(body.Prompt.texts))
	for i, p := range body.Prompt.texts {
		reqs[i] = &batcher.Request{
			Route:    body.Model,
			Input:    batcher.Input{Op: batcher.OpCompletion, Prompt: p},
			Params:   params,
			Metadata: body.Metadata,
		}
		if n > 1 { // the core refuses it by its rule on n (only chat routes answer several choices)
			reqs[i].Params.MutableRich().N = n
		}
	}
	return reqs, nil
}

// checkInputs checks an input that may be an array: set, not empty, within
// the item limit, and text rather than token ids.
func checkInputs(name string, in *inputList, maxInputs int) *Error {
	switch {
	case !in.set:
		return badRequest(name, "must be set: a string or an array of strings")
	case in.tokens:
		return badRequest(name, "token-id inputs are not served: Batcher's backends take text, so send strings")
	case len(in.texts) == 0:
		return badRequest(name, "must hold at least one item")
	case len(in.texts) > maxInputs:
		return badRequest(name, "must hold at most %d items, got %d", maxInputs, len(in.texts))
	}
	return nil
}

// itemID names item i of n: the call's id, suffixed when there are several.
func itemID(id string, i, n int) string {
	if n == 1 {
		return id
	}
	return id + "-" + strconv.Itoa(i)
}
