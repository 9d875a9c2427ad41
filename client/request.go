package client

import (
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// RequestOption sets a field of a Request built by Chat, Complete or Embed.
//
// Options do not validate: the service checks every field and rejects a bad
// one with INVALID_ARGUMENT naming it.
type RequestOption func(*batcherv1.Request)

// Chat builds a chat request for the route model. Add its conversation with
// System, User, Assistant or Message options, in order.
func Chat(model string, opts ...RequestOption) *batcherv1.Request {
	r := &batcherv1.Request{Model: model, Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{}}}
	return apply(r, opts)
}

// Complete builds a text completion request for the route model.
func Complete(model, prompt string, opts ...RequestOption) *batcherv1.Request {
	r := &batcherv1.Request{Model: model, Input: &batcherv1.Request_Completion{Completion: &batcherv1.CompletionInput{Prompt: prompt}}}
	return apply(r, opts)
}

// Embed builds an embedding request for the route model.
func Embed(model, text string, opts ...RequestOption) *batcherv1.Request {
	r := &batcherv1.Request{Model: model, Input: &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: text}}}
	return apply(r, opts)
}

func apply(r *batcherv1.Request, opts []RequestOption) *batcherv1.Request {
	for _, o := range opts {
		o(r)
	}
	return r
}

// Message appends a chat turn with the given role ("system", "user",
// "assistant" or "tool"). On a request whose input is not a chat, it makes
// the input a chat holding this turn.
func Message(role, content string) RequestOption {
	return func(r *batcherv1.Request) {
		chat := r.GetChat()
		if chat == nil {
			chat = &batcherv1.ChatInput{}
			r.Input = &batcherv1.Request_Chat{Chat: chat}
		}
		chat.Messages = append(chat.Messages, &batcherv1.ChatMessage{Role: role, Content: content})
	}
}

// System appends a system turn: Message("system", content).
func System(content string) RequestOption { return Message("system", content) }

// User appends a user turn: Message("user", content).
func User(content string) RequestOption { return Message("user", content) }

// Assistant appends an assistant turn: Message("assistant", content).
func Assistant(content string) RequestOption { return Message("assistant", content) }

// WithID sets the request's id. Default: empty, and a Stream's Send or the
// service's Submit assigns one. The service rejects an id over 128 bytes.
func WithID(id string) RequestOption { return func(r *batcherv1.Request) { r.Id = id } }

// WithPriority sets the request's priority. Default PRIORITY_UNSPECIFIED,
// which the service treats as PRIORITY_NORMAL; an unknown value is rejected.
func WithPriority(p batcherv1.Priority) RequestOption {
	return func(r *batcherv1.Request) { r.Priority = p }
}

// WithMaxTokens caps the tokens to generate. Default: the route's default.
// The service rejects values below 1 or above the route's limit.
func WithMaxTokens(n int32) RequestOption {
	return func(r *batcherv1.Request) { params(r).MaxTokens = &n }
}

// WithTemperature sets the sampling temperature. Default: the provider's.
// The service rejects values outside 0 to 2.
func WithTemperature(t float32) RequestOption {
	return func(r *batcherv1.Request) { params(r).Temperature = &t }
}

// WithTopP sets nucleus sampling. Default: the provider's. The service
// rejects values outside (0, 1].
func WithTopP(p float32) RequestOption {
	return func(r *batcherv1.Request) { params(r).TopP = &p }
}

// WithStop adds stop sequences. Default: none. The service rejects more
// than 4.
func WithStop(seqs ...string) RequestOption {
	return func(r *batcherv1.Request) { params(r).Stop = append(params(r).Stop, seqs...) }
}

// WithSeed sets the sampling seed. Default: none.
func WithSeed(seed int64) RequestOption {
	return func(r *batcherv1.Request) { params(r).Seed = &seed }
}

// WithTimeout bounds the request's life on the server, queueing included.
// Default: none (the RPC deadline and the server's queue timeout still
// apply); the service rejects a negative value.
func WithTimeout(d time.Duration) RequestOption {
	return func(r *batcherv1.Request) { r.Timeout = durationpb.New(d) }
}

// WithMetadata sets one metadata entry, echoed on the completion. Default:
// none. The service rejects more than 32 entries.
func WithMetadata(key, value string) RequestOption {
	return func(r *batcherv1.Request) {
		if r.Metadata == nil {
			r.Metadata = make(map[string]string)
		}
		r.Metadata[key] = value
	}
}

// WithDedup sets whether identical requests in flight at once may share one
// upstream call. Default DEDUP_UNSPECIFIED: on where results are
// deterministic, off elsewhere.
func WithDedup(d batcherv1.Dedup) RequestOption {
	return func(r *batcherv1.Request) { r.Dedup = d }
}

func params(r *batcherv1.Request) *batcherv1.GenerationParams {
	if r.Params == nil {
		r.Params = &batcherv1.GenerationParams{}
	}
	return r.Params
}
