package client

import (
	"encoding/json"
	"errors"
	"fmt"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// Tool describes a function the model may call. parameters is its
// arguments' JSON Schema: a map, a struct, or JSON bytes (json.RawMessage
// or []byte); nil for none.
func Tool(name, description string, parameters any) (*batcherv1.Tool, error) {
	s, err := toStruct(parameters)
	if err != nil {
		return nil, fmt.Errorf("tool %q parameters: %w", name, err)
	}
	return &batcherv1.Tool{Name: name, Description: description, Parameters: s}, nil
}

// WithTools adds tools the model may call.
func WithTools(tools ...*batcherv1.Tool) RequestOption {
	return func(r *batcherv1.Request) { r.Tools = append(r.Tools, tools...) }
}

// WithToolChoice makes the model call the named function.
func WithToolChoice(function string) RequestOption {
	return func(r *batcherv1.Request) {
		r.ToolChoice = &batcherv1.ToolChoice{Choice: &batcherv1.ToolChoice_Function{Function: function}}
	}
}

// AssistantToolCalls appends the assistant turn that made calls (as a
// ChatResult's ToolCalls), for the next turn of a tool-call round trip.
func AssistantToolCalls(calls ...*batcherv1.ToolCall) RequestOption {
	return func(r *batcherv1.Request) {
		Message("assistant", "")(r)
		msgs := r.GetChat().Messages
		msgs[len(msgs)-1].ToolCalls = calls
	}
}

// ToolResult appends a tool turn answering the call callID.
func ToolResult(callID, content string) RequestOption {
	return func(r *batcherv1.Request) {
		Message("tool", content)(r)
		msgs := r.GetChat().Messages
		msgs[len(msgs)-1].ToolCallId = callID
	}
}

// WithJSONObject asks for an answer that is a JSON object.
func WithJSONObject() RequestOption {
	return func(r *batcherv1.Request) {
		r.ResponseFormat = &batcherv1.ResponseFormat{Type: batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}
	}
}

// JSONSchema asks for an answer that validates against schema (a map, a
// struct or JSON bytes), strictly when strict is set.
func JSONSchema(name string, schema any, strict bool) (RequestOption, error) {
	s, err := toStruct(schema)
	if err != nil {
		return nil, fmt.Errorf("schema %q: %w", name, err)
	}
	if s == nil {
		return nil, fmt.Errorf("schema %q: must be set", name)
	}
	return func(r *batcherv1.Request) {
		r.ResponseFormat = &batcherv1.ResponseFormat{Type: batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
			Name: name, Schema: s, Strict: strict}
	}, nil
}

// ChatResult is a chat completion's answer, typed.
type ChatResult struct {
	Text         string
	ToolCalls    []*batcherv1.ToolCall
	Refusal      string
	FinishReason batcherv1.FinishReason
	// Choices holds every choice when the request asked for n > 1.
	Choices []*batcherv1.OutputMessage
}

// ChatResultOf reads a completion's answer: its message when it has one
// (tool calls, a refusal, logprobs), else its text.
func ChatResultOf(c *batcherv1.Completion) ChatResult {
	res := ChatResult{Text: c.GetText(), FinishReason: c.GetFinishReason(), Choices: c.GetChoices()}
	if m := c.GetMessage(); m != nil {
		res.Text, res.ToolCalls, res.Refusal = m.GetContent(), m.GetToolCalls(), m.GetRefusal()
	}
	return res
}

// ErrNoJSON is returned by Decode for an answer that is a tool call or a
// refusal rather than text.
var ErrNoJSON = errors.New("client: the answer holds no text to decode")

// Decode unmarshals the answer's text (a JSON or JSON Schema answer) into v.
func (r ChatResult) Decode(v any) error {
	if r.Text == "" {
		return ErrNoJSON
	}
	return json.Unmarshal([]byte(r.Text), v)
}

// DecodeArguments unmarshals a tool call's arguments into v.
func DecodeArguments(call *batcherv1.ToolCall, v any) error {
	return json.Unmarshal([]byte(call.GetArguments()), v)
}

func toStruct(v any) (*structpb.Struct, error) {
	if v == nil {
		return nil, nil
	}
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	case []byte:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	var m map[string]any
	err := json.Unmarshal(b, &m)
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		at := syn.Offset // the bytes read, the bad one included
		if at > 0 && at <= int64(len(b)) && err.Error() != "unexpected end of JSON input" {
			at--
		}
		line, col := position(b, at)
		return nil, fmt.Errorf("not valid JSON: %w (line %d, column %d)", err, line, col)
	}
	if err != nil || m == nil {
		return nil, errors.New("must be a JSON object")
	}
	return structpb.NewStruct(m)
}

// position returns the 1-based line and column (in bytes) of b's byte at
// offset (len(b): just past the end).
func position(b []byte, offset int64) (line, col int) {
	line, col = 1, 1
	for _, c := range b[:min(int(offset), len(b))] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}
