package openaiapi

import (
	"github.com/batcherhq/batcher/batcher"
)

// The wire for the other doors that speak OpenAI's shapes: a batch job's
// input lines (package jobs) are read exactly as /v1/chat/completions,
// /v1/completions and /v1/embeddings read a body, through these, so that
// there is one decoder per endpoint; its chat output lines are written by
// the chat renderer.

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
	if e := lineWhole(b.Stream, b.StreamOptions); e != nil {
		return nil, e
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

// CompletionBody decodes the body of a completions request, as
// /v1/completions reads it (completionToCore), into a core request: the
// model as Route, the prompt, the parameters (max_tokens or
// max_completion_tokens, n, ...) and the metadata; a field /v1/completions
// does not read is refused by name, as there. A batch line holds one
// prompt (a string, or an array of one); a streamed body and echo, which
// a line's answer cannot carry, are refused by name. It sets no ID,
// priority, timeout or cache mode: the caller's door does. The error
// names the field at fault (Error.Param, as sent).
func CompletionBody(body []byte) (*batcher.Request, *Error) {
	var b completionRequest
	if e := decodeKnownBody(body, &b, knownCompletionFields(), DefaultMaxJSONDepth, "/v1/completions"); e != nil {
		return nil, e
	}
	if e := lineWhole(b.Stream, b.StreamOptions); e != nil {
		return nil, e
	}
	if b.Echo {
		return nil, badRequest("echo", "is not served in batch lines: a line's answer holds the completion alone")
	}
	if e := lineOne("prompt", &b.Prompt); e != nil {
		return nil, e
	}
	reqs, e := completionToCore(&b, 1)
	if e != nil {
		return nil, e
	}
	return reqs[0], nil
}

// EmbeddingBody decodes the body of an embeddings request, as
// /v1/embeddings reads it (embeddingToCore), into a core request: the
// model as Route and the input; a field /v1/embeddings does not read (a
// generation parameter, say) is refused by name, as there. A batch line
// holds one input (a string, or an array of one). dimensions and a base64
// encoding_format, which /v1/embeddings serves on its answer, are refused
// by name: a line's answer does not carry them yet. It sets no ID,
// priority, timeout or cache mode. The error names the field at fault.
func EmbeddingBody(body []byte) (*batcher.Request, *Error) {
	var b embeddingRequest
	if e := decodeKnownBody(body, &b, knownEmbeddingFields(), DefaultMaxJSONDepth, "/v1/embeddings"); e != nil {
		return nil, e
	}
	if e := lineOne("input", &b.Input); e != nil {
		return nil, e
	}
	reqs, e := embeddingToCore(&b, 1)
	if e != nil {
		return nil, e
	}
	if b.Dimensions != nil {
		return nil, badRequest("dimensions", "is not served in batch lines: a line's answer holds the model's whole embedding")
	}
	if b.EncodingFormat == "base64" {
		return nil, badRequest("encoding_format", "must be float in batch lines: a line's answer holds the embedding as numbers")
	}
	return reqs[0], nil
}

// lineOne refuses an array of several prompts or inputs in a batch line,
// which holds one (a line an item), with a message that says so; the
// endpoint's own limit (WithMaxInputs, which may be 1 too) is checked
// after, by checkInputs.
func lineOne(name string, in *inputList) *Error {
	if len(in.texts) > 1 {
		return badRequest(name, "a batch line holds one item, got %d: send one line each", len(in.texts))
	}
	return nil
}

// lineWhole refuses a streamed body in a batch line: a line is answered
// whole.
func lineWhole(stream bool, o *streamOptions) *Error {
	if stream {
		return badRequest("stream", "must not be true: a batch line is answered whole")
	}
	if o != nil {
		return badRequest("stream_options", "must not be set: a batch line is answered whole")
	}
	return nil
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
