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
	n           *int64
}

// toCore checks what the core cannot see once translated (ranges of the
// wider JSON numbers, n) and translates the rest; the core validates the
// values against the route.
func (g *genParams) toCore() (batcher.Params, *Error) {
	var p batcher.Params
	if g.n != nil && *g.n != 1 {
		return p, badRequest("n", "must be 1: Batcher answers one choice per request, got %d", *g.n)
	}
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
