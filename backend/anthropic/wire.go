package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/batcherhq/batcher/batcher"
)

// The Messages API's request and response shapes. Responses are decoded
// leniently: unknown fields (and block types Batcher does not read, such
// as thinking) are ignored.

type messagesRequest struct {
	Model         string        `json:"model"`
	MaxTokens     int32         `json:"max_tokens"`
	System        string        `json:"system,omitempty"`
	Messages      []wireMessage `json:"messages"`
	StopSequences []string      `json:"stop_sequences,omitempty"`
	Temperature   *float32      `json:"temperature,omitempty"`
	TopP          *float32      `json:"top_p,omitempty"`
	Tools         []wireTool    `json:"tools,omitempty"`
	ToolChoice    *toolChoice   `json:"tool_choice,omitempty"`
	Metadata      *metadata     `json:"metadata,omitempty"`
	Stream        bool          `json:"stream,omitempty"`
	// extra holds the request's provider-specific fields, spliced into
	// the body (withExtra).
	extra []byte
}

// setFields are the body fields the backend sets itself: a request's
// extra body may not hold them.
var setFields = []string{"model", "max_tokens", "system", "messages", "stop_sequences", "temperature", "top_p",
	"tools", "tool_choice", "metadata", "stream"}

type wireMessage struct {
	Role    string      `json:"role"`
	Content []wireBlock `json:"content"`
}

type wireBlock struct {
	Type   string      `json:"type"`
	Text   string      `json:"text,omitempty"`
	Source *wireSource `json:"source,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result
	ToolUseID string `json:"tool_use_id,omitempty"`
	Content   string `json:"content,omitempty"`
}

type wireSource struct {
	Type      string `json:"type"` // base64 or url
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

type wireTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type toolChoice struct {
	Type                   string `json:"type"` // auto, any, tool, none
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

type metadata struct {
	UserID string `json:"user_id,omitempty"`
}

type wireUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

type messagesResponse struct {
	Type    string `json:"type"`
	Content []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason string     `json:"stop_reason"`
	Usage      *wireUsage `json:"usage"`
}

// errorResponse is Anthropic's error body: {"type":"error","error":
// {"type":"overloaded_error","message":"Overloaded"}}.
type errorResponse struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// emptySchema is the input_schema of a tool that takes no arguments:
// Anthropic requires one.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// buildRequest translates request r into a Messages API call of model
// with maxTokens. It fails, naming the field, on what the API cannot
// carry: a seed, an image that is neither an https nor a data URL, tool
// call arguments that are not a JSON object, a tool message without the
// call it answers, or extra body fields the backend sets itself.
func buildRequest(model string, r *batcher.Request, maxTokens int32) (*messagesRequest, error) {
	p := &r.Params
	if p.Seed != nil {
		return nil, fmt.Errorf("params.seed: not supported by the Anthropic Messages API")
	}
	req := &messagesRequest{Model: model, MaxTokens: maxTokens, Temperature: p.Temperature, TopP: p.TopP, StopSequences: p.Stop}
	if err := req.setTurns(r.Input.Messages); err != nil {
		return nil, err
	}
	req.setTools(r)
	o := r.ChatOptions()
	if o.User != "" {
		req.Metadata = &metadata{UserID: o.User}
	}
	if len(o.Extra) > 0 {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(o.Extra, &fields); err != nil {
			return nil, fmt.Errorf("extra_body: must be a JSON object")
		}
		for _, f := range setFields {
			if _, ok := fields[f]; ok {
				return nil, fmt.Errorf("extra_body.%s: set by Batcher from the request's own fields", f)
			}
		}
		req.extra = o.Extra
	}
	return req, nil
}

// setTurns sets the system prompt (the system and developer messages,
// text only) and the turns from msgs.
func (req *messagesRequest) setTurns(msgs []batcher.Message) error {
	var system []string
	for i := range msgs {
		m := &msgs[i]
		at := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "system", "developer":
			for _, part := range m.Parts {
				if part.Kind == batcher.PartImage {
					return fmt.Errorf("%s: a system prompt holds text only on Anthropic", at)
				}
			}
			system = append(system, m.Text())
		case "user":
			blocks, err := contentBlocks(m, at)
			if err != nil {
				return err
			}
			req.appendTurn("user", blocks)
		case "assistant":
			blocks, err := assistantBlocks(m, at)
			if err != nil {
				return err
			}
			req.appendTurn("assistant", blocks)
		case "tool":
			if m.ToolCallID == "" {
				return fmt.Errorf("%s.tool_call_id: must be set on a tool message", at)
			}
			req.appendTurn("user", []wireBlock{{Type: "tool_result", ToolUseID: m.ToolCallID, Content: m.Text()}})
		default:
			return fmt.Errorf("%s.role: %q has no Anthropic equivalent", at, m.Role)
		}
	}
	if len(req.Messages) == 0 {
		return fmt.Errorf("messages: Anthropic needs at least one user or assistant message besides the system prompt")
	}
	req.System = strings.Join(system, "\n\n")
	return nil
}

// assistantBlocks are an assistant turn's blocks: its content, then its
// tool calls as tool_use blocks.
func assistantBlocks(m *batcher.Message, at string) ([]wireBlock, error) {
	blocks, err := contentBlocks(m, at)
	if err != nil {
		return nil, err
	}
	for j, c := range m.ToolCalls {
		args := strings.TrimSpace(c.Arguments)
		if args == "" {
			args = "{}"
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
			return nil, fmt.Errorf("%s.tool_calls[%d].arguments: must be a JSON object for Anthropic's tool_use input", at, j)
		}
		blocks = append(blocks, wireBlock{Type: "tool_use", ID: c.ID, Name: c.Name, Input: json.RawMessage(args)})
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: an assistant turn needs content or tool calls", at)
	}
	return blocks, nil
}

// setTools sets the tools and the tool choice from r's.
func (req *messagesRequest) setTools(r *batcher.Request) {
	o := r.ChatOptions()
	if len(o.Tools) > 0 {
		req.Tools = make([]wireTool, len(o.Tools))
		for i, t := range o.Tools {
			schema := json.RawMessage(t.Parameters)
			if len(schema) == 0 {
				schema = emptySchema
			}
			req.Tools[i] = wireTool{Name: t.Name, Description: t.Description, InputSchema: schema}
		}
	}
	switch tc := o.ToolChoice; tc.Mode {
	case batcher.ToolChoiceAuto:
		req.ToolChoice = &toolChoice{Type: "auto"}
	case batcher.ToolChoiceNone:
		req.ToolChoice = &toolChoice{Type: "none"}
	case batcher.ToolChoiceRequired:
		req.ToolChoice = &toolChoice{Type: "any"}
	case batcher.ToolChoiceFunction:
		req.ToolChoice = &toolChoice{Type: "tool", Name: tc.Function}
	}
	if ptc := o.ParallelToolCalls; ptc != nil && !*ptc {
		if req.ToolChoice == nil {
			req.ToolChoice = &toolChoice{Type: "auto"}
		}
		if req.ToolChoice.Type != "none" { // none: no call at all, none in parallel either
			req.ToolChoice.DisableParallelToolUse = true
		}
	}
}

// appendTurn adds blocks as a turn of role, merged into the last turn when
// it has the same role: Anthropic's turns alternate, and the results of
// one assistant turn's tool calls go back in one user turn.
func (req *messagesRequest) appendTurn(role string, blocks []wireBlock) {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == role {
		req.Messages[n-1].Content = append(req.Messages[n-1].Content, blocks...)
		return
	}
	req.Messages = append(req.Messages, wireMessage{Role: role, Content: blocks})
}

// contentBlocks translates a user or assistant message's content.
func contentBlocks(m *batcher.Message, at string) ([]wireBlock, error) {
	if len(m.Parts) == 0 {
		if m.Content == "" {
			return nil, nil
		}
		return []wireBlock{{Type: "text", Text: m.Content}}, nil
	}
	out := make([]wireBlock, 0, len(m.Parts))
	for j, p := range m.Parts {
		switch p.Kind {
		case batcher.PartImage:
			src, err := imageSource(p.ImageURL)
			if err != nil {
				return nil, fmt.Errorf("%s.content[%d].image_url: %w", at, j, err)
			}
			out = append(out, wireBlock{Type: "image", Source: src})
		default:
			if p.Text != "" {
				out = append(out, wireBlock{Type: "text", Text: p.Text})
			}
		}
	}
	return out, nil
}

// imageSource turns an image URL into Anthropic's source: a data URL
// (data:image/png;base64,...) as base64, an http(s) URL as url. The detail
// setting has no equivalent and is left to Anthropic's own sizing.
func imageSource(u string) (*wireSource, error) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		mediaType, isB64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isB64 || mediaType == "" || data == "" {
			return nil, fmt.Errorf("a data URL must be data:<media type>;base64,<data>")
		}
		return &wireSource{Type: "base64", MediaType: mediaType, Data: data}, nil
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return &wireSource{Type: "url", URL: u}, nil
	}
	return nil, fmt.Errorf("must be an http(s) URL or a base64 data URL")
}

// extraBody returns the fields to add at the top level of the encoded
// body.
func (r *messagesRequest) extraBody() []byte { return r.extra }

// withExtra splices body's extra fields into raw, the encoded body.
func withExtra(raw []byte, body *messagesRequest) []byte {
	extra := body.extraBody()
	if len(extra) < 3 || len(raw) < 2 || raw[len(raw)-1] != '}' {
		return raw
	}
	extra = []byte(strings.TrimSpace(string(extra)))
	if len(extra) < 3 || extra[0] != '{' || extra[len(extra)-1] != '}' || strings.TrimSpace(string(extra[1:len(extra)-1])) == "" {
		return raw
	}
	out := make([]byte, 0, len(raw)+len(extra))
	out = append(out, raw[:len(raw)-1]...)
	out = append(out, ',')
	return append(out, extra[1:]...)
}

// finishReason maps Anthropic's stop reasons.
func finishReason(s string) batcher.FinishReason {
	switch s {
	case "end_turn", "stop_sequence", "pause_turn":
		return batcher.FinishStop
	case "max_tokens", "model_context_window_exceeded":
		return batcher.FinishLength
	case "tool_use":
		return batcher.FinishToolCalls
	case "refusal":
		return batcher.FinishContentFilter
	}
	return batcher.FinishUnspecified
}
