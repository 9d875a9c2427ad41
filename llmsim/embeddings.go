package llmsim

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
)

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	s.st.embeddings.Add(1)
	var req embeddingRequest
	if !s.begin(w, r, &req) {
		return
	}
	if !s.checkModel(w, req.Model) {
		return
	}
	if !checkInputs(w, "input", len(req.Input)) {
		return
	}
	for i, in := range req.Input {
		if in == "" {
			badRequest(w, "input", fmt.Sprintf("'input[%d]' must not be empty.", i))
			return
		}
	}
	dim := s.cfg.EmbeddingDim
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > dim {
			badRequest(w, "dimensions", fmt.Sprintf("'dimensions' must be 1 to %d.", dim))
			return
		}
		dim = *req.Dimensions
	}
	b64 := false
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		b64 = true
	default:
		badRequest(w, "encoding_format", "'encoding_format' must be float or base64.")
		return
	}
	resp := embeddingResponse{Object: "list", Model: req.Model, Data: make([]embeddingData, len(req.Input))}
	a := answer{inputs: len(req.Input)}
	for i, in := range req.Input {
		resp.Data[i] = embeddingData{Object: "embedding", Index: i, Embedding: Embedding(in, dim)}
		a.promptTokens += Tokens(in)
	}
	a.cost = a.promptTokens
	resp.Usage = usage{PromptTokens: a.promptTokens, TotalTokens: a.promptTokens}
	if b64 {
		a.body = base64Embeddings(resp)
	} else {
		a.body = resp
	}
	s.serve(w, r, &a)
}

// base64Embeddings encodes each embedding as little-endian float32s in
// base64, as OpenAI does for encoding_format "base64".
func base64Embeddings(resp embeddingResponse) any {
	type item struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding string `json:"embedding"`
	}
	out := struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []item `json:"data"`
		Usage  usage  `json:"usage"`
	}{Object: resp.Object, Model: resp.Model, Data: make([]item, len(resp.Data)), Usage: resp.Usage}
	for i, d := range resp.Data {
		buf := make([]byte, 4*len(d.Embedding))
		for j, f := range d.Embedding {
			binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
		}
		out.Data[i] = item{Object: d.Object, Index: d.Index, Embedding: base64.StdEncoding.EncodeToString(buf)}
	}
	return out
}
