package batcher

import (
	"cmp"
	"math"
	"strconv"
	"time"

	"github.com/batcherhq/batcher/internal/clip"
)

// Limits on request fields that do not depend on the route.
const (
	MaxIDBytes = 128
	// MaxMetadataEntries bounds a request's metadata as the gRPC doors
	// document it (batcher.proto). A door that speaks a tighter outside
	// contract passes its own bound to CheckMetadata first: the OpenAI
	// doors hold a request to OpenAI's 16 (openaiapi.MaxMetadata).
	MaxMetadataEntries  = 32
	MaxMetadataKeyBytes = 64
	MaxMetadataValBytes = 512
	MaxStopSequences    = 4
	MaxStopBytes        = 64
	MaxChatMessages     = 256
	// MaxBackoffFactor bounds RetryOverride.Factor.
	MaxBackoffFactor = 10
	// MaxTimeout bounds Request.Timeout.
	MaxTimeout = 24 * time.Hour
)

var validRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true, "developer": true}

// validate checks r against its route and returns a *ValidationError naming
// the first bad field.
func validate(r *Request, rc *routeConfig) *ValidationError {
	if ve := CheckID("id", r.ID, MaxIDBytes); ve != nil {
		return ve
	}
	if r.Priority > PriorityDeferrable {
		return invalid("priority", "unknown priority %d", r.Priority)
	}
	if ve := validateInput(&r.Input, rc); ve != nil {
		return ve
	}
	if ve := validateParams(&r.Params, rc); ve != nil {
		return ve
	}
	if r.mayBeRich() { // inlined: a plain request makes no call
		if ve := validateRich(r, r.Input.Op, rc.features); ve != nil {
			return ve
		}
	}
	return validateHandling(r, rc)
}

// Validate checks r against the route ri by the rule Submit applies: its
// id, priority, input, generation parameters and their ranges
// (max_tokens up to the route's limit, temperature, top_p, stop, the
// penalties, n, logprobs, ...), the chat surface beyond text (parts,
// tools, tool choice, response format, user, extra body fields) and its
// handling (timeout, metadata, retry override, dedup, stream). It returns a
// *ValidationError (wrapping ErrInvalid) naming the first bad field and its
// limit, or the first field ri's backends cannot honour (naming the
// fallback that cannot, as Submit does), or nil. A door that holds
// requests before submitting them (a batch job's items, an OpenAI batch
// file's lines) calls it to refuse such a request when it arrives, not
// when it runs. A RouteInfo whose MaxTokensLimit or MaxInputBytes is 0
// has the defaults.
func Validate(r *Request, ri RouteInfo) error {
	rc := routeConfig{Route: Route{Name: ri.Name, Op: ri.Op,
		MaxTokensLimit: cmp.Or(ri.MaxTokensLimit, DefaultMaxTokensLimit),
		MaxInputBytes:  cmp.Or(ri.MaxInputBytes, DefaultMaxInputBytes)}, features: ri.Features}
	if ve := validate(r, &rc); ve != nil {
		return blameFallback(ve, ri.Features, ri.Targets, func(have Features) *ValidationError {
			again := rc
			again.features = have
			return validate(r, &again)
		})
	}
	return nil
}

// ValidateParams checks generation parameters p on their own, as Validate
// checks a request's: for a door that takes defaults for requests to come
// (a batch job's spec), so that a bad default is refused naming it once,
// not in every item. Its *ValidationError names the field as
// "params.<name>".
func ValidateParams(p *Params, ri RouteInfo) error {
	rc := routeConfig{Route: Route{Name: ri.Name, Op: ri.Op, MaxTokensLimit: cmp.Or(ri.MaxTokensLimit, DefaultMaxTokensLimit)},
		features: ri.Features}
	if ve := validateParams(p, &rc); ve != nil {
		return ve
	}
	if ve := validateRichParams(p.rich(), ri.Features); ve != nil {
		return ve
	}
	return nil
}

// blame is ve, validate's refusal of r, naming the fallback that cannot
// take the field when it is a fallback that cannot (blameFallback).
func (rc *routeConfig) blame(r *Request, ve *ValidationError) *ValidationError {
	if len(rc.targets) < 2 || ve.Reason != unsupportedReason {
		return ve
	}
	return blameFallback(ve, rc.features, rc.targetInfo(), func(have Features) *ValidationError {
		again := *rc
		again.features = have
		return validate(r, &again)
	})
}

// validateInput checks the input against its route: its operation, its
// content and its size.
func validateInput(in *Input, rc *routeConfig) *ValidationError {
	if in.Op != rc.Op {
		if in.Op == 0 {
			return invalid("input", "must be set: route %q takes %s input", rc.Name, rc.Op)
		}
		return invalid("input", "route %q takes %s input, got %s", rc.Name, rc.Op, in.Op)
	}
	switch in.Op {
	case OpChat:
		if len(in.Messages) == 0 {
			return invalid("input.chat.messages", "must hold at least one message")
		}
		if len(in.Messages) > MaxChatMessages {
			return invalid("input.chat.messages", "must hold at most %d messages, got %d", MaxChatMessages, len(in.Messages))
		}
		empty := true
		for i := range in.Messages {
			m := &in.Messages[i]
			if !validRoles[m.Role] {
				return invalid("input.chat.messages["+strconv.Itoa(i)+"].role", "must be system, user, assistant, tool or developer, got %q", clip.String(m.Role))
			}
			if m.Content != "" {
				empty = false
			}
			if m.rich() {
				if ve := validateMessage(m, i, rc.features); ve != nil {
					return ve
				}
				empty = empty && len(m.Parts) == 0 && len(m.ToolCalls) == 0
			}
		}
		if empty {
			return invalid("input.chat.messages", "every message is empty")
		}
	case OpCompletion:
		if in.Prompt == "" {
			return invalid("input.completion.prompt", "must not be empty")
		}
	case OpEmbedding:
		if in.Text == "" {
			return invalid("input.embedding.text", "must not be empty")
		}
	}
	if n := in.Size(); n > rc.MaxInputBytes {
		return invalid("input", "must be at most %d bytes, got %d", rc.MaxInputBytes, n)
	}
	return nil
}

// validateParams checks the generation parameters that every request may
// carry; validateRich checks the others.
func validateParams(p *Params, rc *routeConfig) *ValidationError {
	if rc.Op == OpEmbedding {
		if f := generationParam(p); f != "" {
			// An embedding backend sends none of them upstream, and lanes
			// and the cache ignore them: taking one would answer a request
			// other than the one sent.
			return invalid(f, "route %q serves embeddings, which take no generation parameters", rc.Name)
		}
		return nil
	}
	if p.MaxTokens < 0 || p.MaxTokens > rc.MaxTokensLimit {
		return invalid("params.max_tokens", "must be 1 to %d, got %d", rc.MaxTokensLimit, p.MaxTokens)
	}
	if t := p.Temperature; t != nil && (isNaN(*t) || *t < 0 || *t > 2) {
		return invalid("params.temperature", "must be 0 to 2, got %v", *t)
	}
	if t := p.TopP; t != nil && (isNaN(*t) || *t <= 0 || *t > 1) {
		return invalid("params.top_p", "must be greater than 0 and at most 1, got %v", *t)
	}
	if p.Seed != nil && !rc.features.Has(FeatureSeed) {
		return unsupported("params.seed")
	}
	if len(p.Stop) > MaxStopSequences {
		return invalid("params.stop", "must hold at most %d sequences, got %d", MaxStopSequences, len(p.Stop))
	}
	for i, s := range p.Stop {
		if s == "" || len(s) > MaxStopBytes {
			return invalid("params.stop["+strconv.Itoa(i)+"]", "must be 1 to %d bytes, got %d", MaxStopBytes, len(s))
		}
	}
	return nil
}

// generationParam names the first generation parameter p sets, or "".
func generationParam(p *Params) string {
	rp := p.rich()
	for _, x := range [...]struct {
		name string
		set  bool
	}{{"params.max_tokens", p.MaxTokens != 0}, {"params.temperature", p.Temperature != nil}, {"params.top_p", p.TopP != nil},
		{"params.stop", len(p.Stop) > 0}, {"params.seed", p.Seed != nil}, {"params.presence_penalty", rp.PresencePenalty != nil},
		{"params.frequency_penalty", rp.FrequencyPenalty != nil}, {"params.n", rp.N != 0}, {"params.logit_bias", len(rp.LogitBias) > 0},
		{"params.logprobs", rp.Logprobs}, {"params.top_logprobs", rp.TopLogprobs != nil}, {"params.reasoning_effort", rp.ReasoningEffort != ""}} {
		if x.set {
			return x.name
		}
	}
	return ""
}

// validateHandling checks how r is to be handled: its timeout, metadata,
// retry override, dedup mode and streaming.
func validateHandling(r *Request, rc *routeConfig) *ValidationError {
	if r.Timeout < 0 {
		return invalid("timeout", "must not be negative, got %v", r.Timeout)
	}
	if r.Timeout > MaxTimeout {
		return invalid("timeout", "must be at most 24h, got %v", r.Timeout)
	}
	if ve := CheckMetadata("metadata", r.Metadata, MaxMetadataEntries); ve != nil {
		return ve
	}
	if o := r.Retry; o != nil && o.Factor != 0 && !(o.Factor >= 1 && o.Factor <= MaxBackoffFactor) {
		return invalid("retry.factor", "must be 0 (the backend's) or 1 to %v, got %v", MaxBackoffFactor, o.Factor)
	}
	if r.Dedup > DedupOff {
		return invalid("dedup", "unknown mode %d", r.Dedup)
	}
	if r.Stream {
		if rc.Op == OpEmbedding {
			return invalid("stream", "route %q serves embeddings, which are not streamed", rc.Name)
		}
		if r.Dedup == DedupOn {
			return invalid("dedup", "must not be on for a streamed request: it goes upstream alone")
		}
		if rp := r.Params.rich(); rp.N > 1 {
			return invalid("params.n", "a streamed request has one choice, got %d", rp.N)
		} else if rp.Logprobs {
			return invalid("params.logprobs", "log probabilities are not streamed: ask without stream")
		}
	}
	return nil
}

func isNaN(f float32) bool { return math.IsNaN(float64(f)) }
