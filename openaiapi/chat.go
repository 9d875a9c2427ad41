package openaiapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// chat serves POST /v1/chat/completions.
func (h *Handler) chat(w http.ResponseWriter, r *http.Request) {
	var body chatRequest
	raw, e := readBody(w, r, h.cfg.maxBody)
	if e == nil {
		e = decode(raw, &body, h.cfg.maxDepth)
	}
	if e == nil {
		e = streamOptionsSet(body.Stream, body.StreamOptions)
	}
	if e != nil {
		WriteError(w, e)
		return
	}
	req, o, e := h.chatRequest(r, &body)
	if e == nil {
		var extra []byte
		if extra, e = extraFields(raw); extra != nil {
			req.MutableChat().Extra = extra
		}
	}
	if e != nil {
		WriteError(w, e)
		return
	}
	if body.Stream {
		h.streamChat(w, r, req, &body, o) // stream.go
		return
	}
	res, err := h.run(r.Context(), []*batcher.Request{req}, false, priorityParam(r, body.ServiceTier))
	if err != nil {
		WriteError(w, chatError(err, &body))
		return
	}
	out := res[0]
	setResultHeaders(w, req.ID, &out)
	writeJSON(w, ChatCompletionBody(req.ID, body.Model, time.Now().Unix(), tierName(body.ServiceTier, o), &out))
}

// chatRequest translates a chat body into a core request.
func (h *Handler) chatRequest(r *http.Request, body *chatRequest) (*batcher.Request, callOptions, *Error) {
	o, e := h.options(r, body.ServiceTier)
	if e != nil {
		return nil, o, e
	}
	if body.Model == "" {
		return nil, o, badRequest("model", "must be set")
	}
	req, e := chatToCore(body)
	if e != nil {
		return nil, o, e
	}
	o.stamp(h.newID("chatcmpl-"), req)
	return req, o, nil
}

// chatToCore translates a chat body into a core request without the
// caller's options (id, priority, timeout, cache mode), which its door
// sets: the HTTP headers here, a batch job's spec for a batch line.
func chatToCore(body *chatRequest) (*batcher.Request, *Error) {
	if len(body.Messages) == 0 {
		return nil, badRequest("messages", "must hold at least one message")
	}
	if len(body.Messages) > batcher.MaxChatMessages {
		return nil, badRequest("messages", "must hold at most %d messages, got %d", batcher.MaxChatMessages, len(body.Messages))
	}
	e := checkMetadata(body.Metadata)
	if e != nil {
		return nil, e
	}
	g := genParams{temperature: body.Temperature, topP: body.TopP, stop: body.Stop, seed: body.Seed}
	if g.maxTokens, g.maxParam, e = pickMaxTokens(body.MaxTokens, body.MaxCompletionTokens); e != nil {
		return nil, e
	}
	params, e := g.toCore()
	if e != nil {
		return nil, e
	}
	n, e := choices(body.N) // several choices, where the backend honours n (the core checks)
	if e != nil {
		return nil, e
	}
	msgs := make([]batcher.Message, len(body.Messages))
	for i := range body.Messages {
		if e := messageToCore(&body.Messages[i], i, &msgs[i]); e != nil {
			return nil, e
		}
	}
	req := &batcher.Request{
		Route:    body.Model,
		Input:    batcher.Input{Op: batcher.OpChat, Messages: msgs},
		Params:   params,
		Metadata: body.Metadata,
	}
	if e := body.extrasToCore(req, n); e != nil {
		return nil, e
	}
	return req, nil
}

// join returns the content's text: the string, or its text parts joined
// by newlines. Other parts (images, audio) are refused by name.
func (c *content) join(param string) (string, *Error) {
	if c.parts == nil {
		return c.text, nil
	}
	var sb strings.Builder
	for j, p := range c.parts {
		if p.Type != "text" {
			return "", badRequest(param+"["+strconv.Itoa(j)+"].type", "only text parts are served, got %q", truncate(p.Type))
		}
		if j > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(p.Text)
	}
	return sb.String(), nil
}

// tierName is the service_tier a response reports: the one asked for,
// or the one the priority header implies.
func tierName(asked string, o callOptions) string {
	if asked != "" && asked != "auto" {
		return asked
	}
	switch o.priority {
	case batcher.PriorityUrgent, batcher.PriorityHigh:
		return "priority"
	case batcher.PriorityLow, batcher.PriorityDeferrable:
		return "flex"
	}
	return "default"
}

// setResultHeaders tells the caller how its request was batched.
func setResultHeaders(w http.ResponseWriter, id string, res *batcher.Result) {
	h := w.Header()
	h.Set("X-Request-Id", id)
	h.Set("X-Batcher-Batch-Size", strconv.Itoa(res.BatchSize))
	h.Set("X-Batcher-Attempts", strconv.Itoa(res.Attempts))
	if res.Deduplicated {
		h.Set("X-Batcher-Deduplicated", "true")
	}
	if res.Cached {
		h.Set(CacheHeader, "hit")
	}
}

// streamOptionsSet refuses stream_options on a request that does not
// stream, as OpenAI does: what it asks for (a usage chunk) would be
// dropped.
func streamOptionsSet(stream bool, o *streamOptions) *Error {
	if o != nil && !stream {
		return badRequest("stream_options", "is only allowed when stream is true")
	}
	return nil
}
