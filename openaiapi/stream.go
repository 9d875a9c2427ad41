package openaiapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// Streamed answers (stream: true). The request goes to the core streamed
// (batcher.Request.Stream): its deltas become chunks as the model makes
// them. The response's status is chosen at the first delta: a request
// that fails before any answers with its error status as an unstreamed
// call would, so a caller's retry logic still works. After it, a failure
// is an "error" event (as OpenAI sends mid-stream errors) and the stream
// ends without [DONE]; a success ends with the finish chunk, the usage
// chunk when stream_options.include_usage asks for it, and [DONE]. A
// caller that goes away cancels the request, which closes the upstream
// call at once; one that reads too slowly gets coalesced chunks, then an
// error event (batcher.ErrStreamOverflow).

// chunkDelta is a chat chunk's delta.
type chunkDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	Refusal   *string         `json:"refusal,omitempty"`
	ToolCalls []chunkToolCall `json:"tool_calls,omitempty"`
}

type chunkToolCall struct {
	Index    int32             `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function chunkToolCallFunc `json:"function"`
}

type chunkToolCallFunc struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type chatChunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
	Logprobs     *struct{}  `json:"logprobs"`
}

type chatChunk struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	Model       string            `json:"model"`
	Choices     []chatChunkChoice `json:"choices"`
	Usage       *chunkUsage       `json:"usage,omitempty"`
	ServiceTier string            `json:"service_tier,omitempty"`
}

// chunkUsage is a chunk's usage. When stream_options.include_usage asks
// for it OpenAI sends "usage": null on every chunk but the last, which
// holds it, and no usage field when not: a nil one is left out, and
// &nullUsage is the null. A pointer, so that encoding a chunk stays
// without allocations (a Marshaler held by value would be boxed).
type chunkUsage usage

var (
	nullUsage chunkUsage
	jsonNull  = []byte("null")
)

func (u *chunkUsage) MarshalJSON() ([]byte, error) {
	if u == &nullUsage {
		return jsonNull, nil
	}
	return json.Marshal((*usage)(u))
}

// completionChunk is a streamed completion's chunk: a completion whose
// usage is a chunkUsage (the shallower "usage" is the one encoded; the
// completion's own stays nil).
type completionChunk struct {
	completion
	Usage *chunkUsage `json:"usage,omitempty"`
}

// streamErrorEvent is a mid-stream failure, shaped as OpenAI's.
type streamErrorEvent struct {
	Error errorFields `json:"error"`
}

// startStream admits and submits req streamed and waits for its first
// delta or its end. When it fails before any delta it writes the error
// and returns nil. tier is the call's service_tier, for the param of a
// priority refused (priorityParam).
func (h *Handler) startStream(w http.ResponseWriter, r *http.Request, req *batcher.Request, tier string, errorOf func(error) *Error) *batcher.Call {
	ctx := r.Context()
	if err := admit(ctx, h.core, req, priorityParam(r, tier)); err != nil {
		WriteError(w, errorOf(err))
		return nil
	}
	req.Stream = true
	c, err := h.core.Submit(ctx, req)
	if err != nil {
		WriteError(w, errorOf(err))
		return nil
	}
	select {
	case <-c.DeltasReady(): // pumpDeltas takes before it waits again
	case <-ctx.Done():
		c.Cancel()
		return nil
	}
	select {
	case <-c.Done():
		if res := c.Result(); res.Err != nil && !res.Partial { // no delta was sent
			WriteError(w, errorOf(res.Err))
			return nil
		}
	default:
	}
	return c
}

// pumpDeltas hands c's deltas to each until the end, and returns its
// result. The caller's going away cancels c.
func pumpDeltas(ctx context.Context, c *batcher.Call, each func(d *batcher.Delta)) batcher.Result {
	var ds []batcher.Delta
	for {
		var more bool
		ds, more = c.Deltas(ds[:0])
		for i := range ds {
			each(&ds[i])
		}
		clear(ds)
		if !more {
			return c.Result()
		}
		if len(ds) > 0 {
			continue // look again before waiting: the wake-up may be spent
		}
		select {
		case <-c.DeltasReady():
		case <-ctx.Done():
			c.Cancel()
			return c.Result()
		}
	}
}

// streamChat answers a chat call with stream: true.
func (h *Handler) streamChat(w http.ResponseWriter, r *http.Request, req *batcher.Request, body *chatRequest, o callOptions) {
	c := h.startStream(w, r, req, body.ServiceTier, func(err error) *Error { return chatError(err, body) })
	if c == nil {
		return
	}
	w.Header().Set("X-Request-Id", req.ID)
	sse := startSSE(w)
	ch := chatChunk{ID: req.ID, Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: body.Model,
		ServiceTier: tierName(body.ServiceTier, o)}
	ch.Choices = []chatChunkChoice{{}}
	includeUsage := body.StreamOptions != nil && body.StreamOptions.IncludeUsage
	if includeUsage {
		ch.Usage = &nullUsage
	}
	first := true
	// role opens the answer as OpenAI does: a chunk of the role and empty
	// content alone ({"role":"assistant","content":""}) before the text,
	// or the role on the first tool call's chunk.
	role := func(cc *chatChunkChoice, toolCall bool) {
		if !first {
			return
		}
		first = false
		if toolCall {
			cc.Delta.Role = "assistant"
			return
		}
		empty := ""
		*cc = chatChunkChoice{Delta: chunkDelta{Role: "assistant", Content: &empty}}
		sse.event(&ch)
		*cc = chatChunkChoice{}
	}
	res := pumpDeltas(r.Context(), c, func(d *batcher.Delta) {
		cc := &ch.Choices[0]
		*cc = chatChunkChoice{}
		role(cc, len(d.ToolCalls) > 0)
		if d.FinishReason != batcher.FinishUnspecified || d.Usage != nil {
			if d.Text == "" && d.Refusal == "" && len(d.ToolCalls) == 0 {
				return // the end: written below, from the result
			}
		}
		if d.Text != "" || (d.Refusal == "" && len(d.ToolCalls) == 0) {
			cc.Delta.Content = &d.Text
		}
		if d.Refusal != "" {
			cc.Delta.Refusal = &d.Refusal
		}
		for _, t := range d.ToolCalls {
			tc := chunkToolCall{Index: t.Index, ID: t.ID, Function: chunkToolCallFunc{Name: t.Name, Arguments: t.Arguments}}
			if t.ID != "" {
				tc.Type = "function"
			}
			cc.Delta.ToolCalls = append(cc.Delta.ToolCalls, tc)
		}
		sse.event(&ch)
	})
	if res.Err != nil {
		sse.event(streamError(res.Err))
		return
	}
	role(&ch.Choices[0], false) // an answer of no delta opens too
	fr := finishReason(res.FinishReason)
	if len(res.ChatOutput().ToolCalls) > 0 && res.FinishReason == batcher.FinishStop {
		s := "tool_calls"
		fr = &s
	}
	ch.Choices = []chatChunkChoice{{FinishReason: fr}}
	sse.event(&ch)
	if includeUsage {
		ch.Choices = []chatChunkChoice{}
		ch.Usage = (*chunkUsage)(usageOf(res.Usage))
		sse.event(&ch)
	}
	sse.done()
}

// streamCompletion answers a completions call of one prompt with stream:
// true.
func (h *Handler) streamCompletion(w http.ResponseWriter, r *http.Request, req *batcher.Request, body *completionRequest, id string) {
	c := h.startStream(w, r, req, body.ServiceTier, func(err error) *Error { return ErrorFrom(err, "prompt") })
	if c == nil {
		return
	}
	w.Header().Set("X-Request-Id", id)
	sse := startSSE(w)
	resp := completionChunk{completion: completion{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: body.Model}}
	resp.Choices = []completionChoice{{}}
	includeUsage := body.StreamOptions != nil && body.StreamOptions.IncludeUsage
	if includeUsage {
		resp.Usage = &nullUsage
	}
	echo := body.Echo
	res := pumpDeltas(r.Context(), c, func(d *batcher.Delta) {
		text := d.Text
		if echo {
			text, echo = req.Input.Prompt+text, false
		}
		if text == "" {
			return
		}
		resp.Choices[0] = completionChoice{Text: text}
		sse.event(&resp)
	})
	if res.Err != nil {
		sse.event(streamError(res.Err))
		return
	}
	resp.Choices[0] = completionChoice{FinishReason: finishReason(res.FinishReason)}
	sse.event(&resp)
	if includeUsage {
		resp.Choices = []completionChoice{}
		resp.Usage = (*chunkUsage)(usageOf(res.Usage))
		sse.event(&resp)
	}
	sse.done()
}

// streamError is the event of a failure after the stream began.
func streamError(err error) *streamErrorEvent {
	e := ErrorFrom(err, "")
	ev := &streamErrorEvent{Error: errorFields{Message: e.Message, Type: e.Type}}
	if e.Code != "" {
		ev.Error.Code = &e.Code
	}
	return ev
}
