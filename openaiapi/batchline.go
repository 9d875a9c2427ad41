package openaiapi

import (
	"github.com/batcherhq/batcher/batcher"
)

// The chat wire for the other doors that speak OpenAI's shapes: a batch
// job's input lines and its output lines (package jobs) read and write a
// chat completion exactly as /v1/chat/completions does, through these, so
// that there is one decoder and one renderer of the chat surface.

// ChatBody decodes the body of a chat completions request, as
// /v1/chat/completions reads it, into a core request: the model as Route,
// the messages with their parts, names, tool calls and tool answers, the
// parameters, tools, tool choice, response format and user, and unknown
// top-level fields as extra body fields (Request.Chat.Extra), which the core
// refuses by name where the backend cannot forward them. It sets no ID,
// priority, timeout or cache mode: the caller's door does. A streamed body
// is refused: a batch line is answered whole. The error names the field at
// fault (Error.Param, as sent).
func ChatBody(body []byte) (*batcher.Request, *Error) {
	var b chatRequest
	if e := decode(body, &b, DefaultMaxJSONDepth); e != nil {
		return nil, e
	}
	if b.Stream {
		return nil, badRequest("stream", "must not be true: a batch line is answered whole")
	}
	if b.StreamOptions != nil {
		return nil, badRequest("stream_options", "must not be set: a batch line is answered whole")
	}
	req, e := chatToCore(&b)
	if e != nil {
		return nil, e
	}
	extra, e := extraFields(body)
	if e != nil {
		return nil, e
	}
	if extra != nil {
		req.MutableChat().Extra = extra
	}
	return req, nil
}

// ChatCompletionBody renders a chat result as /v1/chat/completions
// answers it: a chat.completion object whose choices hold the whole
// message (content, refusal, tool calls), the finish reason, the log
// probabilities, and the usage. A batch job's output line carries it as
// its response body. serviceTier is left out when empty.
func ChatCompletionBody(id, model string, created int64, serviceTier string, res *batcher.Result) any {
	return &chatCompletion{ID: id, Object: "chat.completion", Created: created, Model: model, ServiceTier: serviceTier,
		Choices: chatChoices(res), Usage: usageOf(res.Usage)}
}
