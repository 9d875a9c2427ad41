package openai

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/batcherhq/batcher/batcher"
)

// The chat surface beyond text, both ways: what a request carries is sent
// as OpenAI's fields, provider-specific fields are spliced in verbatim,
// and the answer's tool calls, refusal, logprobs and choices come back.
// An answer that breaks what the request asked (a call of a tool it did
// not offer, arguments or a strict response that are not the JSON asked
// for) is an invalid_response, which the core retries as such.

// chatFeatures is everything: an OpenAI-compatible upstream takes all of
// it on chat (or answers 400 itself when a model does not).
const chatFeatures = batcher.AllFeatures

// Features tells the core what the backend honours (FeatureDeclarer):
// everything on chat routes; on completion routes the parameters the
// /completions endpoint takes; nothing beyond text on embeddings.
func (b *Backend) Features(_, _ string, op batcher.Operation) batcher.Features {
	switch op {
	case batcher.OpChat:
		return chatFeatures
	case batcher.OpCompletion:
		// One call carries the whole batch, whose requests share these
		// (ParamRich is in its shared parameters).
		return batcher.FeaturePenalties | batcher.FeatureLogitBias | batcher.FeatureUser | batcher.FeatureExtraBody | batcher.FeatureSeed
	}
	return batcher.FeatureSeed
}

var _ batcher.FeatureDeclarer = (*Backend)(nil)

// wireMessages translates a chat's messages.
func wireMessages(in []batcher.Message) []wireMessage {
	msgs := make([]wireMessage, len(in))
	for k := range in {
		m := &in[k]
		msgs[k] = wireMessage{Role: m.Role, Content: m.Content}
		if len(m.Parts) == 0 && len(m.ToolCalls) == 0 && m.Name == "" && m.ToolCallID == "" {
			continue
		}
		msgs[k].Name, msgs[k].ToolCallID = m.Name, m.ToolCallID
		if len(m.Parts) > 0 {
			parts := make([]wirePart, len(m.Parts))
			for j, p := range m.Parts {
				if p.Kind == batcher.PartImage {
					parts[j] = wirePart{Type: "image_url", ImageURL: &wireImageURL{URL: p.ImageURL, Detail: p.Detail}}
				} else {
					parts[j] = wirePart{Type: "text", Text: p.Text}
				}
			}
			msgs[k].Content = parts
		}
		if len(m.ToolCalls) > 0 {
			msgs[k].ToolCalls = make([]wireToolCall, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				msgs[k].ToolCalls[j] = wireToolCall{ID: c.ID, Type: "function", Function: wireFunctionCall{Name: c.Name, Arguments: c.Arguments}}
			}
			if m.Content == "" {
				msgs[k].Content = nil
			}
		}
	}
	return msgs
}

// setRich sets req's fields beyond text from r.
func setRich(req *chatRequest, r *batcher.Request) {
	o := r.ChatOptions()
	if len(o.Tools) > 0 {
		req.Tools = make([]wireTool, len(o.Tools))
		for i, t := range o.Tools {
			req.Tools[i] = wireTool{Type: "function", Function: wireFunction{Name: t.Name, Description: t.Description,
				Parameters: t.Parameters, Strict: t.Strict}}
		}
	}
	switch tc := o.ToolChoice; tc.Mode {
	case batcher.ToolChoiceAuto:
		req.ToolChoice = "auto"
	case batcher.ToolChoiceNone:
		req.ToolChoice = "none"
	case batcher.ToolChoiceRequired:
		req.ToolChoice = "required"
	case batcher.ToolChoiceFunction:
		req.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Function}}
	}
	req.ParallelToolCalls = o.ParallelToolCalls
	switch rf := o.ResponseFormat; rf.Type {
	case batcher.FormatText:
		req.ResponseFormat = json.RawMessage(`{"type":"text"}`)
	case batcher.FormatJSONObject:
		req.ResponseFormat = json.RawMessage(`{"type":"json_object"}`)
	case batcher.FormatJSONSchema:
		js := map[string]any{"name": rf.Name, "schema": json.RawMessage(rf.Schema), "strict": rf.Strict}
		if rf.Description != "" {
			js["description"] = rf.Description
		}
		req.ResponseFormat, _ = json.Marshal(map[string]any{"type": "json_schema", "json_schema": js})
	}
	p := r.Params.RichParams()
	req.PresencePenalty, req.FrequencyPenalty = p.PresencePenalty, p.FrequencyPenalty
	if p.N > 1 {
		req.N = p.N
	}
	req.LogitBias, req.Logprobs, req.TopLogprobs = p.LogitBias, p.Logprobs, p.TopLogprobs
	req.User, req.ReasoningEffort = o.User, p.ReasoningEffort
	req.extra = o.Extra
}

// withExtra splices body's extra fields (an extraBody method; a JSON
// object the core validated, none of whose fields Batcher sets) into raw,
// the encoded body.
func withExtra(raw []byte, body any) []byte {
	eb, ok := body.(interface{ extraBody() []byte })
	if !ok {
		return raw
	}
	extra := eb.extraBody()
	if len(extra) < 3 || len(raw) < 2 || raw[len(raw)-1] != '}' { // "{}": nothing to add
		return raw
	}
	out := make([]byte, 0, len(raw)+len(extra))
	out = append(out, raw[:len(raw)-1]...)
	out = append(out, ',')
	return append(out, extra[1:]...)
}

// richAnswer reads the reply of one rich request's call.
func (b *Backend) richAnswer(resp *chatResponse, r *batcher.Request, ep string) batcher.Response {
	if len(resp.Choices) == 0 {
		return batcher.Response{Err: invalidResponse(200, ep, "no choices", nil)}
	}
	n := max(int(r.Params.RichParams().N), 1)
	choices := make([]batcher.Choice, n)
	seen := make([]bool, n)
	for k := range resp.Choices {
		c := &resp.Choices[k]
		i := c.Index
		if i < 0 || i >= n || seen[i] {
			return batcher.Response{Err: invalidResponse(200, ep, fmt.Sprintf("choice index %d out of place", i), nil)}
		}
		seen[i] = true
		ch, err := b.richChoice(c.Message.Content, c.Message.Refusal, c.Message.ToolCalls, c.Logprobs, c.FinishReason, r)
		if err != nil {
			return batcher.Response{Err: invalidResponse(200, ep, err.Error(), nil)}
		}
		choices[i] = ch
	}
	for i, ok := range seen {
		if !ok {
			return batcher.Response{Err: invalidResponse(200, ep, fmt.Sprintf("choice %d missing", i), nil)}
		}
	}
	c := &choices[0]
	var all []batcher.Choice
	if n > 1 {
		all = choices
	}
	return batcher.Response{Text: c.Text, Chat: batcher.NewChatOutput(c.ToolCalls, c.Refusal, c.Logprobs, all),
		FinishReason: c.FinishReason, Usage: clampUsage(usageOf(resp.Usage))}
}

// richChoice reads one choice and checks it against what r asked for.
func (b *Backend) richChoice(content, refusal *string, calls []wireToolCall, lp *wireLogprobs, finish string, r *batcher.Request) (batcher.Choice, error) {
	ch := batcher.Choice{FinishReason: finishReason(finish)}
	if finish == "tool_calls" {
		ch.FinishReason = batcher.FinishToolCalls
	}
	if content != nil {
		ch.Text = *content
	}
	if refusal != nil {
		ch.Refusal = *refusal
		if ch.FinishReason == batcher.FinishStop {
			ch.FinishReason = batcher.FinishContentFilter
		}
	}
	if content == nil && refusal == nil && len(calls) == 0 {
		return ch, errors.New("no content")
	}
	for _, c := range calls {
		ch.ToolCalls = append(ch.ToolCalls, batcher.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	if err := b.checkAnswer(&ch, r); err != nil {
		return ch, err
	}
	if lp != nil {
		ch.Logprobs = &batcher.Logprobs{Content: tokens(lp.Content), Refusal: tokens(lp.Refusal)}
	}
	return ch, nil
}

// checkAnswer checks an answer, whole or streamed, against what r asked
// for: each tool call names a tool of r with JSON arguments (which follow
// the tool's schema when it is strict), and a text answer to a JSON
// response format is JSON (following the schema when it is strict).
func (b *Backend) checkAnswer(ch *batcher.Choice, r *batcher.Request) error {
	for i := range ch.ToolCalls {
		c := &ch.ToolCalls[i]
		t := toolNamed(r, c.Name)
		if t == nil {
			return fmt.Errorf("a call of %q, which is not a tool of the request", clip(c.Name, 64))
		}
		if !json.Valid([]byte(c.Arguments)) {
			return fmt.Errorf("tool call %q: arguments are not JSON", clip(c.Name, 64))
		}
		if t.Strict && t.Parameters != nil {
			if err := b.schemas.Validate(t.Parameters, []byte(c.Arguments)); err != nil {
				return fmt.Errorf("tool call %q: arguments break the strict schema: %w", clip(c.Name, 64), err)
			}
		}
	}
	if len(ch.ToolCalls) == 0 && ch.Refusal == "" && ch.FinishReason != batcher.FinishLength {
		switch rf := r.ChatOptions().ResponseFormat; rf.Type {
		case batcher.FormatJSONObject:
			if !json.Valid([]byte(ch.Text)) {
				return errors.New("response_format json_object: the answer is not JSON")
			}
		case batcher.FormatJSONSchema:
			if !json.Valid([]byte(ch.Text)) {
				return errors.New("response_format json_schema: the answer is not JSON")
			}
			if rf.Strict {
				if err := b.schemas.Validate(rf.Schema, []byte(ch.Text)); err != nil {
					return fmt.Errorf("response_format json_schema: the answer breaks the strict schema: %w", err)
				}
			}
		}
	}
	return nil
}

func toolNamed(r *batcher.Request, name string) *batcher.Tool {
	tools := r.ChatOptions().Tools
	for i := range tools {
		if tools[i].Name == name {
			return &tools[i]
		}
	}
	return nil
}

func tokens(in []wireTokenLogprob) []batcher.TokenLogprob {
	if in == nil {
		return nil
	}
	out := make([]batcher.TokenLogprob, len(in))
	for i, t := range in {
		out[i] = batcher.TokenLogprob{Token: t.Token, Logprob: t.Logprob, Bytes: bytesOf(t.Bytes)}
		for _, tp := range t.TopLogprobs {
			out[i].Top = append(out[i].Top, batcher.TopLogprob{Token: tp.Token, Logprob: tp.Logprob, Bytes: bytesOf(tp.Bytes)})
		}
	}
	return out
}

func bytesOf(in []int) []byte {
	if in == nil {
		return nil
	}
	out := make([]byte, len(in))
	for i, c := range in {
		out[i] = byte(c)
	}
	return out
}
