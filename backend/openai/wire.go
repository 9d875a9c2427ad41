package openai

import "encoding/json"

// The OpenAI request and response shapes. Responses are decoded leniently:
// unknown fields are ignored, and only what Batcher uses is read.

type wireMessage struct {
	Role string `json:"role"`
	// Content is a string, a []wirePart, or nil (an assistant message
	// that only called tools).
	Content    any            `json:"content"`
	Name       string         `json:"name,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wirePart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	ImageURL *wireImageURL `json:"image_url,omitempty"`
}

type wireImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
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

type wireTool struct {
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      bool            `json:"strict,omitempty"`
}

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	MaxTokens           int32           `json:"max_tokens,omitempty"`
	MaxCompletionTokens int32           `json:"max_completion_tokens,omitempty"`
	Temperature         *float32        `json:"temperature,omitempty"`
	TopP                *float32        `json:"top_p,omitempty"`
	Stop                []string        `json:"stop,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	ResponseFormat      json.RawMessage `json:"response_format,omitempty"`

	// The chat surface beyond text (richchat.go).
	Tools             []wireTool         `json:"tools,omitempty"`
	ToolChoice        any                `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool              `json:"parallel_tool_calls,omitempty"`
	PresencePenalty   *float32           `json:"presence_penalty,omitempty"`
	FrequencyPenalty  *float32           `json:"frequency_penalty,omitempty"`
	N                 int32              `json:"n,omitempty"`
	LogitBias         map[string]float32 `json:"logit_bias,omitempty"`
	Logprobs          bool               `json:"logprobs,omitempty"`
	TopLogprobs       *int32             `json:"top_logprobs,omitempty"`
	User              string             `json:"user,omitempty"`
	ReasoningEffort   string             `json:"reasoning_effort,omitempty"`
	// extra holds provider-specific fields, spliced into the body (do).
	extra []byte
}

// extraBody returns the fields to add at the top level of the encoded
// body; streamChatRequest, which embeds chatRequest, has it too.
func (r chatRequest) extraBody() []byte { return r.extra }

type completionRequest struct {
	Model       string   `json:"model"`
	Prompt      []string `json:"prompt"`
	MaxTokens   int32    `json:"max_tokens,omitempty"`
	Temperature *float32 `json:"temperature,omitempty"`
	TopP        *float32 `json:"top_p,omitempty"`
	Stop        []string `json:"stop,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
}

type embeddingRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

type wireUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type chatResponse struct {
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content   *string        `json:"content"`
			Refusal   *string        `json:"refusal"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string        `json:"finish_reason"`
		Logprobs     *wireLogprobs `json:"logprobs"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
}

type completionResponse struct {
	Choices []struct {
		Index        *int    `json:"index"`
		Text         *string `json:"text"`
		FinishReason string  `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
}

type embeddingResponse struct {
	Data []struct {
		Index     *int      `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Usage *wireUsage `json:"usage"`
}

// errorResponse is the error body of OpenAI and of the servers that copy
// it; some send "error" as a bare string, or "message" or "detail" at the
// top.
type errorResponse struct {
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
	Detail  json.RawMessage `json:"detail"`
}

type errorDetail struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

type wireLogprobs struct {
	Content []wireTokenLogprob `json:"content"`
	Refusal []wireTokenLogprob `json:"refusal"`
}

type wireTokenLogprob struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_logprobs"`
}
