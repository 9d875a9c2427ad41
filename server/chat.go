package server

import (
	"encoding/json"
	"strconv"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// The chat surface beyond text, both ways. toCore calls these only when a
// request sets something of it, and completion only when a result holds
// more than text, so that plain requests pay nothing for them.

// messageToCore translates message i's parts, name and tool calls.
func messageToCore(m *batcherv1.ChatMessage, i int, dst *batcher.Message) *status.Status {
	dst.Name = m.GetName()
	dst.ToolCallID = m.GetToolCallId()
	if parts := m.GetParts(); len(parts) > 0 {
		dst.Parts = make([]batcher.ContentPart, len(parts))
		for j, p := range parts {
			switch x := p.GetPart().(type) {
			case *batcherv1.ContentPart_Text:
				dst.Parts[j] = batcher.ContentPart{Kind: batcher.PartText, Text: x.Text}
			case *batcherv1.ContentPart_Image:
				dst.Parts[j] = batcher.ContentPart{Kind: batcher.PartImage, ImageURL: x.Image.GetUrl(), Detail: x.Image.GetDetail()}
			default:
				return invalidArgument("request.chat.messages["+strconv.Itoa(i)+"].parts["+strconv.Itoa(j)+"]", "must be set: text or image")
			}
		}
	}
	if calls := m.GetToolCalls(); len(calls) > 0 {
		dst.ToolCalls = make([]batcher.ToolCall, len(calls))
		for j, c := range calls {
			dst.ToolCalls[j] = batcher.ToolCall{ID: c.GetId(), Name: c.GetName(), Arguments: c.GetArguments()}
		}
	}
	return nil
}

// richParamsToCore translates the parameters beyond the five plain ones.
func richParamsToCore(p *batcherv1.GenerationParams, dst *batcher.Params) *status.Status {
	var rp batcher.RichParams
	rp.PresencePenalty = p.PresencePenalty
	rp.FrequencyPenalty = p.FrequencyPenalty
	if p.N != nil {
		if *p.N < 1 {
			return invalidArgument("request.params.n", "must be at least 1, got "+strconv.Itoa(int(*p.N)))
		}
		rp.N = *p.N
	}
	rp.LogitBias = p.GetLogitBias()
	rp.Logprobs = p.GetLogprobs()
	rp.TopLogprobs = p.TopLogprobs
	rp.ReasoningEffort = p.GetReasoningEffort()
	dst.Rich = nil
	if !rp.IsZero() {
		// A copy, so that only a request with such parameters allocates them.
		set := rp
		dst.Rich = &set
	}
	return nil
}

// chatOptionsToCore translates the request-level chat fields: tools, tool
// choice, response format, user and extra body fields.
func chatOptionsToCore(pr *batcherv1.Request, dst *batcher.Request) *status.Status {
	dst.Chat = nil
	c := batcher.ChatOptions{ParallelToolCalls: pr.ParallelToolCalls, User: pr.GetUser()}
	if tools := pr.GetTools(); len(tools) > 0 {
		c.Tools = make([]batcher.Tool, len(tools))
		for i, t := range tools {
			params, st := structJSON("request.tools["+strconv.Itoa(i)+"].parameters", t.GetParameters())
			if st != nil {
				return st
			}
			c.Tools[i] = batcher.Tool{Name: t.GetName(), Description: t.GetDescription(), Parameters: params, Strict: t.GetStrict()}
		}
	}
	if tc := pr.GetToolChoice(); tc != nil {
		switch tcc := tc.GetChoice().(type) {
		case *batcherv1.ToolChoice_Function:
			c.ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: tcc.Function}
		case *batcherv1.ToolChoice_Mode:
			switch tcc.Mode {
			case batcherv1.ToolChoiceMode_TOOL_CHOICE_MODE_UNSPECIFIED:
			case batcherv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO:
				c.ToolChoice.Mode = batcher.ToolChoiceAuto
			case batcherv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
				c.ToolChoice.Mode = batcher.ToolChoiceNone
			case batcherv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
				c.ToolChoice.Mode = batcher.ToolChoiceRequired
			default:
				return invalidArgument("request.tool_choice.mode", "unknown value "+strconv.Itoa(int(tcc.Mode)))
			}
		}
	}
	if rf := pr.GetResponseFormat(); rf != nil {
		switch t := rf.GetType(); t {
		case batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_UNSPECIFIED:
		case batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_TEXT:
			c.ResponseFormat.Type = batcher.FormatText
		case batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT:
			c.ResponseFormat.Type = batcher.FormatJSONObject
		case batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
			c.ResponseFormat.Type = batcher.FormatJSONSchema
		default:
			return invalidArgument("request.response_format.type", "unknown value "+strconv.Itoa(int(t)))
		}
		schema, st := structJSON("request.response_format.schema", rf.GetSchema())
		if st != nil {
			return st
		}
		c.ResponseFormat.Name, c.ResponseFormat.Description = rf.GetName(), rf.GetDescription()
		c.ResponseFormat.Schema, c.ResponseFormat.Strict = schema, rf.GetStrict()
	}
	if eb := pr.GetExtraBody(); eb != nil {
		extra, st := structJSON("request.extra_body", eb)
		if st != nil {
			return st
		}
		c.Extra = extra
	}
	if !c.IsZero() {
		// A copy, so that only a request with chat options allocates them.
		set := c
		dst.Chat = &set
	}
	return nil
}

// structJSON encodes s as a JSON object with sorted keys (so that equal
// structs give equal bytes, for the lane and dedup keys); nil for nil.
func structJSON(field string, s *structpb.Struct) ([]byte, *status.Status) {
	if s == nil {
		return nil, nil
	}
	b, err := json.Marshal(s.AsMap())
	if err != nil { // a NaN or an infinity: JSON has no such number
		return nil, invalidArgument(field, "cannot be encoded as JSON: "+err.Error())
	}
	return b, nil
}

// outputMessages sets c's message (and choices, with n > 1) from a chat
// result that holds more than text.
func outputMessages(c *batcherv1.Completion, r *batcher.Result) {
	o := r.ChatOutput()
	c.Message = outputMessage(r.Text, o.Refusal, o.ToolCalls, o.Logprobs, r.FinishReason)
	if int(r.FinishReason) < len(finishReasons) {
		c.Message.FinishReason = finishReasons[r.FinishReason]
	}
	if len(o.Choices) > 0 {
		c.Choices = make([]*batcherv1.OutputMessage, len(o.Choices))
		for i := range o.Choices {
			ch := &o.Choices[i]
			c.Choices[i] = outputMessage(ch.Text, ch.Refusal, ch.ToolCalls, ch.Logprobs, ch.FinishReason)
		}
	}
}

func outputMessage(text, refusal string, calls []batcher.ToolCall, lp *batcher.Logprobs, fr batcher.FinishReason) *batcherv1.OutputMessage {
	m := &batcherv1.OutputMessage{Content: text, Refusal: refusal}
	if int(fr) < len(finishReasons) {
		m.FinishReason = finishReasons[fr]
	}
	if len(calls) > 0 {
		m.ToolCalls = make([]*batcherv1.ToolCall, len(calls))
		for i, tc := range calls {
			m.ToolCalls[i] = &batcherv1.ToolCall{Id: tc.ID, Name: tc.Name, Arguments: tc.Arguments}
		}
	}
	if lp != nil {
		m.Logprobs = &batcherv1.Logprobs{Content: tokenLogprobs(lp.Content), Refusal: tokenLogprobs(lp.Refusal)}
	}
	return m
}

func tokenLogprobs(in []batcher.TokenLogprob) []*batcherv1.TokenLogprob {
	if in == nil {
		return nil
	}
	out := make([]*batcherv1.TokenLogprob, len(in))
	for i, t := range in {
		out[i] = &batcherv1.TokenLogprob{Token: t.Token, Logprob: t.Logprob, Bytes: t.Bytes}
		if len(t.Top) > 0 {
			out[i].TopLogprobs = make([]*batcherv1.TopLogprob, len(t.Top))
			for j, tp := range t.Top {
				out[i].TopLogprobs[j] = &batcherv1.TopLogprob{Token: tp.Token, Logprob: tp.Logprob, Bytes: tp.Bytes}
			}
		}
	}
	return out
}
