package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/batcherhq/batcher/batcher"
)

// ItemRequest is one input as a job stores it: the model call before run
// groups apply their model, temperature and seed.
type ItemRequest struct {
	Model    string            `json:"model,omitempty"`
	Input    batcher.Input     `json:"input"`
	Params   batcher.Params    `json:"params"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// URL is the OpenAI endpoint the line named, for its output line.
	URL string `json:"url,omitempty"`
	// ServiceTier is the OpenAI line's service_tier, echoed on its output
	// line.
	ServiceTier string `json:"service_tier,omitempty"`

	// The chat surface beyond text, as batcher.Request's fields of the
	// same names, passed to the core unchanged (Input and Params carry the
	// messages' parts and tool calls and the other parameters). They are
	// part of the task's stored request, an encoded blob, so rows stored
	// before they existed load with them unset.
	Tools             []batcher.Tool         `json:"tools,omitempty"`
	ToolChoice        batcher.ToolChoice     `json:"tool_choice,omitzero"`
	ParallelToolCalls *bool                  `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    batcher.ResponseFormat `json:"response_format,omitzero"`
	User              string                 `json:"user,omitempty"`
	Extra             []byte                 `json:"extra,omitempty"`
}

// coreRequest returns r as a core request of route: the fields the core
// reads at validation, for batcher.Validate. The run sets the rest (run_request.go).
func (r *ItemRequest) coreRequest(route string) *batcher.Request {
	req := &batcher.Request{Route: route, Input: r.Input, Params: r.Params, Metadata: r.Metadata}
	r.setRich(req)
	return req
}

// setRich sets req's chat fields beyond text from r.
func (r *ItemRequest) setRich(req *batcher.Request) {
	o := batcher.ChatOptions{Tools: r.Tools, ToolChoice: r.ToolChoice, ParallelToolCalls: r.ParallelToolCalls,
		ResponseFormat: r.ResponseFormat, User: r.User, Extra: r.Extra}
	req.Chat = nil
	if !o.IsZero() {
		// A copy, so that only a request with chat options allocates them.
		set := o
		req.Chat = &set
	}
}

// Record is a finished task's result as the store keeps it.
type Record struct {
	Text             string               `json:"text,omitempty"`
	Embedding        []float32            `json:"embedding,omitempty"`
	FinishReason     batcher.FinishReason `json:"finish_reason,omitempty"`
	PromptTokens     int32                `json:"prompt_tokens,omitempty"`
	CompletionTokens int32                `json:"completion_tokens,omitempty"`
	Attempts         int                  `json:"attempts,omitempty"`
	BatchID          string               `json:"batch_id,omitempty"`
	BatchSize        int                  `json:"batch_size,omitempty"` // as the Completion showed it
	Backend          string               `json:"backend,omitempty"`
	URL              string               `json:"url,omitempty"`
	ServiceTier      string               `json:"service_tier,omitempty"`
	// ErrCode and ErrMessage are set when the task did not succeed. The
	// codes are OpenAI's batch error codes where one fits (ErrCode...).
	ErrCode    string `json:"err_code,omitempty"`
	ErrMessage string `json:"err_message,omitempty"`
	// JudgePrompt is the prompt a judge task sent: the runs' outputs as the
	// template received them.
	JudgePrompt string `json:"judge_prompt,omitempty"`
	// A chat answer's tool calls, refusal, log probabilities and, with
	// n > 1, every choice: the whole message, as batcher.Result holds it.
	ToolCalls []batcher.ToolCall `json:"tool_calls,omitempty"`
	Refusal   string             `json:"refusal,omitempty"`
	Logprobs  *batcher.Logprobs  `json:"logprobs,omitempty"`
	Choices   []batcher.Choice   `json:"choices,omitempty"`
	// Dispatch is how a successful task was sent (online, batch_api);
	// Cost what it cost in USD at its route's price table, nil without one.
	Dispatch string   `json:"dispatch,omitempty"`
	Cost     *float64 `json:"cost,omitempty"`
}

// Result returns the answer rec holds as a core result, to render (a
// door's own shape: an output line, a JobResult).
func (rec *Record) Result() *batcher.Result {
	res := &batcher.Result{Text: rec.Text, Embedding: rec.Embedding, FinishReason: rec.FinishReason,
		Usage: batcher.Usage{PromptTokens: rec.PromptTokens, CompletionTokens: rec.CompletionTokens}}
	if rec.ToolCalls != nil || rec.Refusal != "" || rec.Logprobs != nil || rec.Choices != nil {
		res.Chat = &batcher.ChatOutput{ToolCalls: rec.ToolCalls, Refusal: rec.Refusal, Logprobs: rec.Logprobs, Choices: rec.Choices}
	}
	return res
}

// The error codes of Record.ErrCode.
const (
	CodeInvalidRequest = "invalid_request"
	CodeExpired        = "batch_expired"
	CodeCancelled      = "batch_cancelled"
	CodeRateLimit      = "rate_limit_exceeded"
	CodeTimeout        = "timeout"
	CodeUnavailable    = "unavailable"
	CodeServerError    = "server_error"
	CodeAuth           = "authentication_error"
)

// errorCode classifies a core error into a Record code.
func errorCode(err error) string {
	switch {
	case errors.Is(err, batcher.ErrInvalid):
		return CodeInvalidRequest
	case errors.Is(err, batcher.ErrCanceled), errors.Is(err, context.Canceled):
		return CodeCancelled
	case errors.Is(err, batcher.ErrDeadline):
		return CodeTimeout
	case errors.Is(err, batcher.ErrBudgetExhausted):
		return CodeRateLimit
	case errors.Is(err, batcher.ErrNoBackend), errors.Is(err, batcher.ErrShutdown), errors.Is(err, batcher.ErrClosed):
		return CodeUnavailable
	}
	switch batcher.ClassOf(err) {
	case batcher.ClassRateLimit:
		return CodeRateLimit
	case batcher.ClassTimeout:
		return CodeTimeout
	case batcher.ClassNetwork:
		return CodeUnavailable
	case batcher.ClassAuth:
		return CodeAuth
	case batcher.ClassInvalidRequest:
		return CodeInvalidRequest
	}
	return CodeServerError
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("jobs: encoding %T: %v", v, err)) // plain structs always encode
	}
	return b
}

// DecodeRecord decodes a task's Result.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if len(b) == 0 {
		return r, nil
	}
	err := json.Unmarshal(b, &r)
	return r, err
}

func errorRecord(code, format string, args ...any) []byte {
	return encode(&Record{ErrCode: code, ErrMessage: fmt.Sprintf(format, args...)})
}
