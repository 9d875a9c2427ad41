package openaiapi

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// The OpenAI request and response shapes this package reads and writes.
// Nothing a caller sends is dropped: a chat body's unknown top-level fields
// go upstream as extra body fields (chattools.go); a completions or
// embeddings body's are refused by name (decodeKnown), as OpenAI refuses an
// unrecognized argument; a field inside one of the objects they read
// (stream_options, tools, content parts...) is refused by its path
// (nested.go); values Batcher cannot serve (n over 8, or over 1 on a
// route that is not chat; token inputs; suffix) are refused by name.

type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []chatMessage     `json:"messages"`
	MaxTokens           *int64            `json:"max_tokens"`
	MaxCompletionTokens *int64            `json:"max_completion_tokens"`
	Temperature         *float64          `json:"temperature"`
	TopP                *float64          `json:"top_p"`
	Stop                stringList        `json:"stop"`
	Seed                *int64            `json:"seed"`
	N                   *int64            `json:"n"`
	Stream              bool              `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options"`
	ServiceTier         string            `json:"service_tier"`
	Metadata            map[string]string `json:"metadata"`
	chatExtras                            // chattools.go
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    content        `json:"content"`
	Name       string         `json:"name"`
	ToolCalls  []wireToolCall `json:"tool_calls"`
	ToolCallID string         `json:"tool_call_id"`
}

// content is a message's content: a string, null, or an array of parts.
type content struct {
	text  string
	parts []contentPart // set when the content was an array
}

type contentPart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text"`
	ImageURL *wireImageURL `json:"image_url"`
}

func (c *content) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case 'n':
		*c = content{}
		return nil
	case '"':
		return json.Unmarshal(b, &c.text)
	case '[':
		c.parts = []contentPart{}
		return json.Unmarshal(b, &c.parts)
	}
	return &json.UnmarshalTypeError{Value: valueKind(b), Type: reflect.TypeFor[string]()}
}

type completionRequest struct {
	Model     string    `json:"model"`
	Prompt    inputList `json:"prompt"`
	MaxTokens *int64    `json:"max_tokens"`
	// MaxCompletionTokens is max_tokens's newer name, as chat takes it:
	// one cap under two names, on every endpoint that caps a completion.
	MaxCompletionTokens *int64            `json:"max_completion_tokens"`
	Temperature         *float64          `json:"temperature"`
	TopP                *float64          `json:"top_p"`
	Stop                stringList        `json:"stop"`
	Seed                *int64            `json:"seed"`
	N                   *int64            `json:"n"`
	Echo                bool              `json:"echo"`
	Suffix              *string           `json:"suffix"`
	Stream              bool              `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options"`
	ServiceTier         string            `json:"service_tier"`
	Metadata            map[string]string `json:"metadata"`
}

type embeddingRequest struct {
	Model          string    `json:"model"`
	Input          inputList `json:"input"`
	EncodingFormat string    `json:"encoding_format"`
	Dimensions     *int64    `json:"dimensions"`
	ServiceTier    string    `json:"service_tier"`
}

// stringList is a string, an array of strings, or null.
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case 'n':
		*s = nil
		return nil
	case '"':
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = stringList{one}
		return nil
	case '[':
		var many []string
		if err := json.Unmarshal(b, &many); err != nil {
			return err
		}
		*s = many
		return nil
	}
	return &json.UnmarshalTypeError{Value: valueKind(b), Type: reflect.TypeFor[[]string]()}
}

// inputList is an input that may be one item or many: a string, an array
// of strings, an array of token ids or an array of such arrays. Token ids
// are recognised, to be refused by name: Batcher's backends take text.
type inputList struct {
	set    bool
	texts  []string
	array  bool // the input was an array
	tokens bool // the input held token ids
}

func (in *inputList) UnmarshalJSON(b []byte) error {
	*in = inputList{set: true}
	switch firstByte(b) {
	case 'n':
		in.set = false
		return nil
	case '"':
		in.texts = make([]string, 1)
		return json.Unmarshal(b, &in.texts[0])
	case '[':
	default:
		return &json.UnmarshalTypeError{Value: valueKind(b), Type: reflect.TypeFor[[]string]()}
	}
	in.array = true
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	in.texts = make([]string, 0, len(raw))
	for _, r := range raw {
		switch firstByte(r) {
		case '"':
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				return err
			}
			in.texts = append(in.texts, s)
		case '[', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			in.tokens = true
			in.texts = append(in.texts, "")
		default:
			return &json.UnmarshalTypeError{Value: valueKind(r), Type: reflect.TypeFor[string]()}
		}
	}
	return nil
}

// firstByte returns b's first non-space byte, 0 if none.
func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// valueKind names a JSON value's kind for a type error.
func valueKind(b []byte) string {
	switch firstByte(b) {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// Responses.

type usage struct {
	PromptTokens     int32 `json:"prompt_tokens"`
	CompletionTokens int32 `json:"completion_tokens"`
	TotalTokens      int32 `json:"total_tokens"`
}

type embeddingUsage struct {
	PromptTokens int32 `json:"prompt_tokens"`
	TotalTokens  int32 `json:"total_tokens"`
}

type chatCompletion struct {
	ID          string       `json:"id"`
	Object      string       `json:"object"`
	Created     int64        `json:"created"`
	Model       string       `json:"model"`
	Choices     []chatChoice `json:"choices"`
	Usage       *usage       `json:"usage,omitempty"`
	ServiceTier string       `json:"service_tier,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatDelta      `json:"delta,omitempty"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     *wireLogprobs   `json:"logprobs"`
}

type chatMessageOut struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"` // null when the model only called tools
	Refusal   *string        `json:"refusal"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

type embeddingList struct {
	Object string          `json:"object"`
	Data   []embeddingItem `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingUsage  `json:"usage"`
}

type embeddingItem struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string  `json:"object"`
	Data   []model `json:"data"`
}
