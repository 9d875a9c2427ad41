package openaiapi

import (
	"encoding/json"
	"io"
	"math"

	"github.com/batcherhq/batcher/batcher"
)

// genParams are the generation parameters chat and completions share.
type genParams struct {
	maxTokens   *int64
	maxParam    string // which field set maxTokens
	temperature *float64
	topP        *float64
	stop        stringList
	seed        *int64
}

// toCore checks what the core cannot see once translated (ranges of the
// wider JSON numbers) and translates the rest; the core validates the
// values against the route.
func (g *genParams) toCore() (batcher.Params, *Error) {
	var p batcher.Params
	if g.maxTokens != nil {
		if *g.maxTokens < 1 {
			return p, badRequest(g.maxParam, "must be at least 1, got %d", *g.maxTokens)
		}
		if *g.maxTokens > math.MaxInt32 {
			return p, badRequest(g.maxParam, "must be 1 to %d, got %d", math.MaxInt32, *g.maxTokens)
		}
		p.MaxTokens = int32(*g.maxTokens)
	}
	var e *Error
	if p.Temperature, e = float32Param("temperature", g.temperature); e != nil {
		return p, e
	}
	if p.TopP, e = float32Param("top_p", g.topP); e != nil {
		return p, e
	}
	p.Stop = g.stop
	p.Seed = g.seed
	return p, nil
}

// pickMaxTokens is the cap on a completion a body asks for under either
// of OpenAI's names, and the name it came by: max_tokens is the older
// name of max_completion_tokens, so two different values are refused
// naming both, rather than one of the caller's dropped.
func pickMaxTokens(maxTokens, maxCompletionTokens *int64) (*int64, string, *Error) {
	if m, o := maxCompletionTokens, maxTokens; m != nil && o != nil && *m != *o {
		return nil, "", badRequest("max_tokens", "is %d and max_completion_tokens %d: set one (max_tokens is the older name of max_completion_tokens)", *o, *m)
	}
	if maxCompletionTokens != nil {
		return maxCompletionTokens, "max_completion_tokens", nil
	}
	return maxTokens, "max_tokens", nil
}

// MaxTokens is the core's Params.MaxTokens (0: unset) for a body that
// sets max_tokens, max_completion_tokens or both, by the rule
// /v1/chat/completions applies: the two must agree, and a value set must
// be at least 1 (the core reads 0 as unset, so an explicit 0 would be
// dropped). A batch job's completions and embeddings lines call it, so
// that every door reads the cap alike. The error names the field.
func MaxTokens(maxTokens, maxCompletionTokens *int64) (int32, *Error) {
	v, name, e := pickMaxTokens(maxTokens, maxCompletionTokens)
	if e != nil {
		return 0, e
	}
	g := genParams{maxTokens: v, maxParam: name}
	p, e := g.toCore()
	return p.MaxTokens, e
}

// choices is the n a body asks for (0: unset), by the rule every door
// applies: 1 to batcher.MaxChoices. Whether the route answers several is
// the core's to say (only chat routes, and where the backend honours n).
func choices(n *int64) (int32, *Error) {
	if n == nil {
		return 0, nil
	}
	if *n < 1 || *n > batcher.MaxChoices {
		return 0, badRequest("n", "must be 1 to %d, got %d", batcher.MaxChoices, *n)
	}
	return int32(*n), nil
}

// MaxMetadata is OpenAI's bound on a request's metadata: 16 pairs. The
// doors that speak OpenAI's contract (the front door's chat and
// completions, and batch lines, read by the same decoders) hold a
// request's metadata to it; the gRPC doors keep the core's documented
// batcher.MaxMetadataEntries (32). Keys and values have the core's
// bounds, batcher.CheckMetadata's, which the core checks again.
const MaxMetadata = 16

// checkMetadata is batcher.CheckMetadata with OpenAI's bound on entries,
// as a 400 naming metadata (and the key whose value is too long).
func checkMetadata(md map[string]string) *Error {
	if ve := batcher.CheckMetadata("metadata", md, MaxMetadata); ve != nil {
		return ErrorFrom(ve, "")
	}
	return nil
}

func float32Param(name string, v *float64) (*float32, *Error) {
	if v == nil {
		return nil, nil
	}
	if math.Abs(*v) > math.MaxFloat32 {
		return nil, badRequest(name, "out of range: %v", *v)
	}
	f := float32(*v)
	return &f, nil
}

// finishReason spells a finish reason as OpenAI does.
func finishReason(f batcher.FinishReason) *string {
	s := "stop"
	switch f {
	case batcher.FinishLength:
		s = "length"
	case batcher.FinishContentFilter:
		s = "content_filter"
	case batcher.FinishToolCalls:
		s = "tool_calls"
	}
	return &s
}

func usageOf(u batcher.Usage) *usage {
	return &usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.Total()}
}

func jsonEncode(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }
