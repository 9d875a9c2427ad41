package llmsim

import (
	"fmt"
	"net/http"
	"strconv"
)

// checkInputs answers 400 unless a batch field holds 1 to MaxInputs entries.
func checkInputs(w http.ResponseWriter, field string, n int) bool {
	switch {
	case n == 0:
		badRequest(w, field, "'"+field+"' must be set.")
		return false
	case n > MaxInputs:
		badRequest(w, field, fmt.Sprintf("'%s' must hold at most %d entries, got %d.", field, MaxInputs, n))
		return false
	}
	return true
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	s.st.completions.Add(1)
	var req completionRequest
	if !s.begin(w, r, &req) {
		return
	}
	if !s.checkModel(w, req.Model) {
		return
	}
	if !checkInputs(w, "prompt", len(req.Prompt)) {
		return
	}
	if req.Stream && len(req.Prompt) != 1 {
		badRequest(w, "prompt", "llmsim streams one prompt a call.")
		return
	}
	if req.N != nil && *req.N != 1 {
		badRequest(w, "n", "llmsim answers n=1 only.")
		return
	}
	maxTokens := 16 // OpenAI's default for /v1/completions
	if req.MaxTokens != nil {
		if *req.MaxTokens < 1 {
			badRequest(w, "max_tokens", "max_tokens must be at least 1.")
			return
		}
		maxTokens = *req.MaxTokens
	}
	resp := completionResponse{
		ID:      "cmpl-sim" + strconv.FormatUint(s.seq.Add(1), 10),
		Object:  "text_completion",
		Created: s.cfg.Now().Unix(),
		Model:   req.Model,
		Choices: make([]completionChoice, len(req.Prompt)),
	}
	a := answer{inputs: len(req.Prompt)}
	for i, p := range req.Prompt {
		text, cut := Reply(p, maxTokens, s.cfg.ReplyTokens)
		resp.Choices[i] = completionChoice{Index: i, Text: text, FinishReason: finish(cut)}
		a.promptTokens += Tokens(p)
		a.completionTokens += Tokens(text)
	}
	a.cost = a.promptTokens + maxTokens*len(req.Prompt)
	resp.Usage = usage{PromptTokens: a.promptTokens, CompletionTokens: a.completionTokens, TotalTokens: a.promptTokens + a.completionTokens}
	a.body = resp
	if req.Stream {
		c := resp.Choices[0]
		a.stream = s.newStream(completionStream, resp.ID, req.Model, c.Text, nil, c.FinishReason, req.StreamOptions)
	}
	s.serve(w, r, &a)
}
