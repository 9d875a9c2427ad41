package openaiapi

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/batcherhq/batcher/batcher"
)

// The chat surface beyond text: tools, tool calls, response formats,
// image parts and the parameters only some backends honour. Unknown
// top-level fields are not ignored: they are forwarded as extra body
// fields (batcher.Request.Chat.Extra), which a backend that cannot forward
// them refuses by name (400 naming the field). So a caller's field is
// always carried or refused, never dropped.

// chatExtras are the chat body's fields beyond text, embedded in
// chatRequest.
type chatExtras struct {
	Tools             []wireTool         `json:"tools"`
	ToolChoice        *wireToolChoice    `json:"tool_choice"`
	ParallelToolCalls *bool              `json:"parallel_tool_calls"`
	ResponseFormat    *wireResponseFmt   `json:"response_format"`
	Logprobs          *bool              `json:"logprobs"`
	TopLogprobs       *int64             `json:"top_logprobs"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	User              string             `json:"user"`
	ReasoningEffort   string             `json:"reasoning_effort"`
}

type wireTool struct {
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type wireToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function wireFunctionCall `json:"function"`
}

type wireFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// wireToolChoice is "none", "auto", "required", or
// {"type":"function","function":{"name":...}}.
type wireToolChoice struct {
	mode     string
	function string
}

func (c *wireToolChoice) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case '"':
		return json.Unmarshal(b, &c.mode)
	case '{':
		var o struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		c.mode, c.function = "function", o.Function.Name
		if o.Type != "function" {
			c.mode = "object:" + o.Type
		}
		return nil
	}
	return &json.UnmarshalTypeError{Value: valueKind(b), Type: reflect.TypeFor[string]()}
}

type wireResponseFmt struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

type wireImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail"`
}

// knownChatFields are the chat body's fields that Batcher reads; every
// other top-level field goes to Extra.
var knownChatFields = sync.OnceValue(func() map[string]bool { return jsonFields(reflect.TypeFor[chatRequest]()) })

// jsonFields are the JSON names of struct type t's fields, those of its
// embedded structs included.
func jsonFields(t reflect.Type) map[string]bool {
	known := map[string]bool{}
	for name := range fieldsOf(t).types {
		known[name] = true
	}
	return known
}

// extraFields returns the body's unknown top-level fields as one JSON
// object with sorted keys (nil when there are none), so that equal
// requests carry equal bytes.
func extraFields(body []byte) ([]byte, *Error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(body, &all); err != nil {
		return nil, badRequest("", "request body must be a JSON object")
	}
	if e := unknownMessageField(all["messages"]); e != nil {
		return nil, e
	}
	known := knownChatFields()
	chatFields := fieldsOf(chatRequestType)
	var extra map[string]json.RawMessage
	for k, v := range all {
		if known[k] {
			continue
		}
		if extra == nil {
			extra = map[string]json.RawMessage{}
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, badRequest(k, "malformed JSON")
		}
		extra[k] = buf.Bytes()
	}
	// The known fields' own objects, in sorted order; messages are
	// unknownMessageField's.
	delete(all, "messages")
	if e := unknownInObject(all, chatFields, "", false); e != nil {
		return nil, e
	}
	if extra == nil {
		return nil, nil
	}
	b, err := json.Marshal(extra)
	if err != nil {
		return nil, badRequest("", "malformed JSON")
	}
	return b, nil
}

var (
	chatRequestType = reflect.TypeFor[chatRequest]()
	chatMessageType = reflect.TypeFor[chatMessage]()
)

var knownMessageFields = sync.OnceValue(func() map[string]bool { return jsonFields(reflect.TypeFor[chatMessage]()) })

// unknownMessageField refuses, naming it, a field of a message that
// Batcher does not read: unlike top-level fields, a message's cannot go
// upstream as extra body fields, and dropping one would send another
// conversation. A field that is null, "" or [] is unset: a response's
// message sent back as history may carry refusal: null or annotations: [].
// Malformed messages are left to the decoder to describe.
func unknownMessageField(raw json.RawMessage) *Error {
	if len(raw) == 0 || firstByte(raw) != '[' {
		return nil
	}
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return nil
	}
	known := knownMessageFields()
	for i, m := range msgs {
		first := ""
		for k, v := range m {
			if known[k] {
				continue
			}
			switch string(bytes.TrimSpace(v)) {
			case "null", `""`, "[]":
				continue
			}
			if first == "" || k < first {
				first = k
			}
		}
		if first != "" {
			return badRequest("messages["+strconv.Itoa(i)+"]."+truncate(first), "is not a message field Batcher serves (it reads content, name, role, tool_call_id and tool_calls)")
		}
		// Its content parts and tool calls (nested.go).
		if e := unknownInObject(m, fieldsOf(chatMessageType), "messages["+strconv.Itoa(i)+"]", false); e != nil {
			return e
		}
	}
	return nil
}

// messageToCore translates message i beyond its role.
func messageToCore(m *chatMessage, i int, dst *batcher.Message) *Error {
	param := "messages[" + strconv.Itoa(i) + "]"
	dst.Role, dst.Name, dst.ToolCallID = m.Role, m.Name, m.ToolCallID
	if m.Content.parts == nil {
		dst.Content = m.Content.text
	} else {
		textOnly := true
		for _, p := range m.Content.parts {
			textOnly = textOnly && p.Type == "text"
		}
		if textOnly { // as before: the text parts joined, a plain message
			text, e := m.Content.join(param + ".content")
			if e != nil {
				return e
			}
			dst.Content = text
		} else {
			dst.Parts = make([]batcher.ContentPart, len(m.Content.parts))
			for j, p := range m.Content.parts {
				pp := param + ".content[" + strconv.Itoa(j) + "]"
				switch p.Type {
				case "text":
					dst.Parts[j] = batcher.ContentPart{Kind: batcher.PartText, Text: p.Text}
				case "image_url":
					if p.ImageURL == nil {
						return badRequest(pp+".image_url", "must be set on an image_url part")
					}
					dst.Parts[j] = batcher.ContentPart{Kind: batcher.PartImage, ImageURL: p.ImageURL.URL, Detail: p.ImageURL.Detail}
				default:
					return badRequest(pp+".type", "only text and image_url parts are served, got %q", truncate(p.Type))
				}
			}
		}
	}
	if len(m.ToolCalls) > 0 {
		dst.ToolCalls = make([]batcher.ToolCall, len(m.ToolCalls))
		for j, c := range m.ToolCalls {
			if c.Type != "" && c.Type != "function" {
				return badRequest(param+".tool_calls["+strconv.Itoa(j)+"].type", "only function tool calls are served, got %q", truncate(c.Type))
			}
			dst.ToolCalls[j] = batcher.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments}
		}
	}
	return nil
}

// extrasToCore translates the request-level fields beyond text, and the
// parameters beyond the plain ones with n, the choices asked for (0: unset).
func (x *chatExtras) extrasToCore(dst *batcher.Request, n int32) *Error {
	var o batcher.ChatOptions
	if len(x.Tools) > 0 {
		o.Tools = make([]batcher.Tool, len(x.Tools))
		for i, t := range x.Tools {
			if t.Type != "function" {
				return badRequest("tools["+strconv.Itoa(i)+"].type", "only function tools are served, got %q", truncate(t.Type))
			}
			params, e := object("tools["+strconv.Itoa(i)+"].function.parameters", t.Function.Parameters)
			if e != nil {
				return e
			}
			o.Tools[i] = batcher.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: params,
				Strict: t.Function.Strict != nil && *t.Function.Strict}
		}
	}
	if c := x.ToolChoice; c != nil {
		switch c.mode {
		case "auto":
			o.ToolChoice.Mode = batcher.ToolChoiceAuto
		case "none":
			o.ToolChoice.Mode = batcher.ToolChoiceNone
		case "required":
			o.ToolChoice.Mode = batcher.ToolChoiceRequired
		case "function":
			o.ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: c.function}
		default:
			return badRequest("tool_choice", "must be none, auto, required or a function, got %q", truncate(strings.TrimPrefix(c.mode, "object:")))
		}
	}
	o.ParallelToolCalls = x.ParallelToolCalls
	if rf := x.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
			o.ResponseFormat.Type = batcher.FormatText
		case "json_object":
			o.ResponseFormat.Type = batcher.FormatJSONObject
		case "json_schema":
			if rf.JSONSchema == nil {
				return badRequest("response_format.json_schema", "must be set for type json_schema")
			}
			schema, e := object("response_format.json_schema.schema", rf.JSONSchema.Schema)
			if e != nil {
				return e
			}
			o.ResponseFormat = batcher.ResponseFormat{Type: batcher.FormatJSONSchema, Name: rf.JSONSchema.Name,
				Description: rf.JSONSchema.Description, Schema: schema, Strict: rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict}
		default:
			return badRequest("response_format.type", "must be text, json_object or json_schema, got %q", truncate(rf.Type))
		}
	}
	p := batcher.RichParams{N: n}
	p.Logprobs = x.Logprobs != nil && *x.Logprobs
	if x.TopLogprobs != nil {
		if *x.TopLogprobs < 0 || *x.TopLogprobs > batcher.MaxTopLogprobs {
			return badRequest("top_logprobs", "must be 0 to %d, got %d", batcher.MaxTopLogprobs, *x.TopLogprobs)
		}
		t := int32(*x.TopLogprobs)
		p.TopLogprobs = &t
	}
	var e *Error
	if p.PresencePenalty, e = float32Param("presence_penalty", x.PresencePenalty); e != nil {
		return e
	}
	if p.FrequencyPenalty, e = float32Param("frequency_penalty", x.FrequencyPenalty); e != nil {
		return e
	}
	if len(x.LogitBias) > 0 {
		p.LogitBias = make(map[string]float32, len(x.LogitBias))
		for k, v := range x.LogitBias {
			if math.Abs(v) > math.MaxFloat32 {
				return badRequest("logit_bias", "out of range: %v", v)
			}
			p.LogitBias[k] = float32(v)
		}
	}
	p.ReasoningEffort = x.ReasoningEffort
	if !p.IsZero() {
		// A copy, so that only a request with such parameters allocates them.
		set := p
		dst.Params.Rich = &set
	}
	o.User = x.User
	if !o.IsZero() {
		// A copy, so that only a request with chat options allocates them.
		set := o
		dst.Chat = &set
	}
	return nil
}

// object compacts a JSON object field; nil for absent or null.
func object(param string, raw json.RawMessage) ([]byte, *Error) {
	if len(raw) == 0 || firstByte(raw) == 'n' {
		return nil, nil
	}
	if firstByte(raw) != '{' {
		return nil, badRequest(param, "must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, badRequest(param, "malformed JSON")
	}
	return buf.Bytes(), nil
}

// Responses.

type wireLogprobs struct {
	Content []wireTokenLogprob `json:"content"`
	Refusal []wireTokenLogprob `json:"refusal"`
}

type wireTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []wireTopLogprob `json:"top_logprobs"`
}

type wireTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatChoices renders a chat result's choices as OpenAI does.
func chatChoices(out *batcher.Result) []chatChoice {
	o := out.ChatOutput()
	if len(o.Choices) == 0 {
		return []chatChoice{outputChoice(0, out.Text, o.Refusal, o.ToolCalls, o.Logprobs, out.FinishReason)}
	}
	cs := make([]chatChoice, len(o.Choices))
	for i := range o.Choices {
		c := &o.Choices[i]
		cs[i] = outputChoice(i, c.Text, c.Refusal, c.ToolCalls, c.Logprobs, c.FinishReason)
	}
	return cs
}

func outputChoice(i int, text, refusal string, calls []batcher.ToolCall, lp *batcher.Logprobs, fr batcher.FinishReason) chatChoice {
	m := &chatMessageOut{Role: "assistant"}
	if text != "" || (len(calls) == 0 && refusal == "") {
		m.Content = &text
	}
	if refusal != "" {
		m.Refusal = &refusal
	}
	m.ToolCalls = wireToolCalls(calls)
	return chatChoice{Index: i, Message: m, FinishReason: finishReason(fr), Logprobs: wireLogprobsOf(lp)}
}

func wireToolCalls(calls []batcher.ToolCall) []wireToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]wireToolCall, len(calls))
	for i, c := range calls {
		out[i] = wireToolCall{ID: c.ID, Type: "function", Function: wireFunctionCall{Name: c.Name, Arguments: c.Arguments}}
	}
	return out
}

func wireLogprobsOf(lp *batcher.Logprobs) *wireLogprobs {
	if lp == nil {
		return nil
	}
	return &wireLogprobs{Content: wireTokens(lp.Content), Refusal: wireTokens(lp.Refusal)}
}

func wireTokens(in []batcher.TokenLogprob) []wireTokenLogprob {
	if in == nil {
		return nil
	}
	out := make([]wireTokenLogprob, len(in))
	for i, t := range in {
		out[i] = wireTokenLogprob{Token: t.Token, Logprob: t.Logprob, Bytes: ints(t.Bytes), TopLogprobs: []wireTopLogprob{}}
		for _, tp := range t.Top {
			out[i].TopLogprobs = append(out[i].TopLogprobs, wireTopLogprob{Token: tp.Token, Logprob: tp.Logprob, Bytes: ints(tp.Bytes)})
		}
	}
	return out
}

func ints(b []byte) []int {
	if b == nil {
		return nil
	}
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}
