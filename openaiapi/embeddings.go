package openaiapi

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"reflect"
	"sync"

	"github.com/batcherhq/batcher/batcher"
)

// embeddings serves POST /v1/embeddings. An input array is split into
// requests that batch with other callers' inputs, then reassembled in
// order.
func (h *Handler) embeddings(w http.ResponseWriter, r *http.Request) {
	var body embeddingRequest
	if e := decodeKnown(w, r, &body, knownEmbeddingFields(), h.cfg.maxBody, h.cfg.maxDepth, "/v1/embeddings"); e != nil {
		WriteError(w, e)
		return
	}
	id, reqs, e := h.embeddingRequests(r, &body)
	if e != nil {
		WriteError(w, e)
		return
	}
	res, err := h.run(r.Context(), reqs, body.Input.array, priorityParam(r, body.ServiceTier))
	if err != nil {
		WriteError(w, ErrorFrom(err, "input"))
		return
	}
	resp := embeddingList{Object: "list", Model: body.Model, Data: make([]embeddingItem, len(res))}
	for i := range res {
		v := res[i].Embedding
		if body.Dimensions != nil {
			if int(*body.Dimensions) > len(v) {
				WriteError(w, badRequest("dimensions", "must be at most the model's %d dimensions, got %d", len(v), *body.Dimensions))
				return
			}
			v = shorten(v, int(*body.Dimensions))
		}
		item := embeddingItem{Object: "embedding", Index: i, Embedding: v}
		if body.EncodingFormat == "base64" {
			item.Embedding = encodeBase64(v)
		}
		resp.Data[i] = item
		resp.Usage.PromptTokens += res[i].Usage.PromptTokens
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	if len(res) == 1 {
		setResultHeaders(w, id, &res[0])
	} else {
		w.Header().Set("X-Request-Id", id)
	}
	writeJSON(w, &resp)
}

var knownEmbeddingFields = sync.OnceValue(func() map[string]bool { return jsonFields(reflect.TypeFor[embeddingRequest]()) })

// embeddingRequests translates an embeddings body into one core request
// per input.
func (h *Handler) embeddingRequests(r *http.Request, body *embeddingRequest) (string, []*batcher.Request, *Error) {
	o, e := h.options(r, body.ServiceTier)
	if e != nil {
		return "", nil, e
	}
	if body.Model == "" {
		return "", nil, badRequest("model", "must be set")
	}
	reqs, e := embeddingToCore(body, h.cfg.maxInputs)
	if e != nil {
		return "", nil, e
	}
	id := h.newID("emb-")
	o.stamp(id, reqs...)
	return id, reqs, nil
}

// embeddingToCore translates an embeddings body into one core request per
// input, at most maxInputs, without the caller's options, which its door
// sets (see completionToCore).
func embeddingToCore(body *embeddingRequest, maxInputs int) ([]*batcher.Request, *Error) {
	if e := checkInputs("input", &body.Input, maxInputs); e != nil {
		return nil, e
	}
	switch body.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, badRequest("encoding_format", "must be float or base64, got %q", truncate(body.EncodingFormat))
	}
	if d := body.Dimensions; d != nil && (*d < 1 || *d > math.MaxInt32) {
		return nil, badRequest("dimensions", "must be 1 to %d, got %d", math.MaxInt32, *d)
	}
	reqs := make([]*batcher.Request, len(body.Input.texts))
	for i, t := range body.Input.texts {
		reqs[i] = &batcher.Request{Route: body.Model, Input: batcher.Input{Op: batcher.OpEmbedding, Text: t}}
	}
	return reqs, nil
}

// shorten keeps an embedding's first n dimensions, scaled back to unit
// length, as OpenAI's dimensions parameter does.
func shorten(v []float32, n int) []float32 {
	if n >= len(v) {
		return v
	}
	out := make([]float32, n)
	var sum float64
	for i := range out {
		out[i] = v[i]
		sum += float64(v[i]) * float64(v[i])
	}
	if sum > 0 {
		scale := float32(1 / math.Sqrt(sum))
		for i := range out {
			out[i] *= scale
		}
	}
	return out
}

// encodeBase64 writes an embedding as OpenAI's base64 format: little-endian
// float32s.
func encodeBase64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
