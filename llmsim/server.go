package llmsim

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/internal/schema"
)

// Server is the simulator, an http.Handler. It is safe for concurrent use.
type Server struct {
	cfg    Config
	models map[string]bool
	lim    *limits
	sem    chan struct{} // nil: no concurrency bound
	mux    *http.ServeMux

	closed    chan struct{}
	closeOnce sync.Once

	rngMu sync.Mutex // guards rng
	rng   *rand.Rand

	seq      atomic.Uint64
	inFlight atomic.Int64
	st       counters
	sst      streamCounters
	bat      batchState   // the batch API (batchapi.go)
	schemas  schema.Cache // compiled response_format schemas (tools.go)

	abOnce sync.Once         // makes ab
	ab     *anthropicBatches // Anthropic's Message Batches (anthropic_batches.go)
}

// New returns a simulator with cfg, or an error naming the bad field.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:    cfg,
		models: make(map[string]bool, len(cfg.Models)),
		lim:    newLimits(cfg.RPM, cfg.TPM, cfg.Now),
		mux:    http.NewServeMux(),
		closed: make(chan struct{}),
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
	}
	for _, m := range cfg.Models {
		s.models[m] = true
	}
	if cfg.MaxConcurrency > 0 {
		s.sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	s.mux.HandleFunc("POST /v1/chat/completions", s.chat)
	s.mux.HandleFunc("POST /v1/completions", s.completions)
	s.mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	s.mux.HandleFunc("POST /v1/messages", s.messages)                   // anthropic.go
	s.mux.HandleFunc("POST /v1/messages/batches", s.createMessageBatch) // anthropic_batches.go
	s.mux.HandleFunc("GET /v1/messages/batches", s.listMessageBatches)
	s.mux.HandleFunc("GET /v1/messages/batches/{id}", s.getMessageBatch)
	s.mux.HandleFunc("GET /v1/messages/batches/{id}/results", s.messageBatchResults)
	s.mux.HandleFunc("POST /v1/messages/batches/{id}/cancel", s.cancelMessageBatch)
	s.mux.HandleFunc("GET /v1/models", s.listModels)
	s.mux.HandleFunc("GET /v1/models/{model}", s.getModel)
	s.routeBatches()
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "Invalid URL ("+r.Method+" "+cutRunes(r.URL.Path, 64)+")")
	})
	return s, nil
}

// ServeHTTP serves the OpenAI endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close releases every call waiting out its latency or a hang fault; they
// end with their connection aborted. Close does not stop an http.Server.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closed) }) }

// Stats counts what the simulator did.
type Stats struct {
	Requests    int64 // calls to the model endpoints
	Chat        int64
	Completions int64
	Embeddings  int64
	OK          int64 // calls answered with 200
	Inputs      int64 // embedding inputs and completion prompts answered
	Packed      int64 // packed chat calls answered
	PackedItems int64 // items in them
	RateLimited int64 // calls answered 429
	// Faults injected.
	Errors    int64
	Timeouts  int64
	Resets    int64
	Malformed int64
	// Tokens of the calls answered with 200.
	PromptTokens     int64
	CompletionTokens int64
	// MaxInFlight is the most calls served at once (past the rate limits).
	MaxInFlight int64
	// Streamed calls begun (status 200 sent), their mid-stream faults, and
	// those whose client closed the connection before the end.
	Streams         int64
	StreamCuts      int64
	StreamStalls    int64
	StreamMalformed int64
	StreamsClosed   int64
}

type counters struct {
	requests, chat, completions, embeddings, ok, inputs, packed, packedItems, rateLimited atomic.Int64
	errors, timeouts, resets, malformed, promptTokens, completionTokens, maxInFlight      atomic.Int64
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	c := &s.st
	return Stats{
		Requests: c.requests.Load(), Chat: c.chat.Load(), Completions: c.completions.Load(), Embeddings: c.embeddings.Load(),
		OK: c.ok.Load(), Inputs: c.inputs.Load(), Packed: c.packed.Load(), PackedItems: c.packedItems.Load(),
		RateLimited: c.rateLimited.Load(), Errors: c.errors.Load(), Timeouts: c.timeouts.Load(), Resets: c.resets.Load(),
		Malformed: c.malformed.Load(), PromptTokens: c.promptTokens.Load(), CompletionTokens: c.completionTokens.Load(),
		MaxInFlight: c.maxInFlight.Load(),
		Streams:     s.sst.streams.Load(), StreamCuts: s.sst.cuts.Load(), StreamStalls: s.sst.stalls.Load(),
		StreamMalformed: s.sst.malformed.Load(), StreamsClosed: s.sst.closed.Load(),
	}
}

// answer is a computed reply, ready to be served.
type answer struct {
	body             any
	promptTokens     int
	completionTokens int
	cost             int // the call's token cost against the TPM
	inputs           int
	packedItems      int
	stream           *streamAnswer // set for a streamed call (stream.go)
	// anthropic is set for an answer of Anthropic's Messages API, whose
	// errors, headers and stream have Anthropic's shapes (anthropic.go).
	anthropic *anthropicAnswer
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.st.chat.Add(1)
	var req chatRequest
	if !s.begin(w, r, &req) {
		return
	}
	if !s.checkModel(w, req.Model) {
		return
	}
	if len(req.Messages) == 0 {
		badRequest(w, "messages", "'messages' must hold at least one message.")
		return
	}
	if req.N != nil && *req.N != 1 {
		badRequest(w, "n", "llmsim answers n=1 only.")
		return
	}
	if t := req.Temperature; t != nil && (*t < 0 || *t > 2) {
		badRequest(w, "temperature", "Invalid 'temperature': must be 0 to 2, got "+strconv.FormatFloat(*t, 'g', -1, 64)+".")
		return
	}
	if !s.checkResponseFormat(w, &req) {
		return
	}
	maxTokens := s.cfg.ReplyTokens
	for _, mt := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if mt != nil {
			if *mt < 1 {
				badRequest(w, "max_tokens", "max_tokens must be at least 1.")
				return
			}
			maxTokens = *mt
		}
	}
	prompt := 3
	var system []string
	last := ""
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer":
			system = append(system, string(m.Content))
		case "user", "assistant", "tool":
		default:
			badRequest(w, "messages["+strconv.Itoa(i)+"].role", "Invalid role "+strconv.Quote(cutRunes(m.Role, 32))+".")
			return
		}
		if m.Role == "user" {
			last = string(m.Content)
		}
		prompt += Tokens(string(m.Content)) + 4
	}
	if last == "" {
		last = string(req.Messages[len(req.Messages)-1].Content)
	}

	var text string
	var cut bool
	a := answer{promptTokens: prompt, cost: prompt + maxTokens}
	if items, budget, err := parsePacked(last); err == nil && isPacked(system) {
		text, cut = s.packedReply(items, budget, maxTokens)
		a.packedItems = len(items)
	} else {
		text, cut = Reply(last, maxTokens, s.cfg.ReplyTokens)
	}
	msg := responseMessage{Role: "assistant", Content: text}
	fr := finish(cut)
	var called *toolCallWire
	if call, ok := s.toolCall(&req, last); ok { // tools.go
		msg.Content, msg.ToolCalls, fr = "", []toolCallWire{call}, "tool_calls"
		text, called = call.Function.Arguments, &call
	} else if rf := req.ResponseFormat; rf != nil && rf.Type != "text" && a.packedItems == 0 {
		// A pack's reply already has the pack's own JSON shape (the
		// packed compiler sends its schema as the response format).
		text = s.structured(&req, text)
		msg.Content = text
	}
	a.completionTokens = Tokens(text)
	a.body = chatResponse{
		ID:      "chatcmpl-sim" + strconv.FormatUint(s.seq.Add(1), 10),
		Object:  "chat.completion",
		Created: s.cfg.Now().Unix(),
		Model:   req.Model,
		Choices: []chatChoice{{Message: msg, FinishReason: fr}},
		Usage:   usage{PromptTokens: a.promptTokens, CompletionTokens: a.completionTokens, TotalTokens: a.promptTokens + a.completionTokens},
	}
	if req.Stream {
		a.stream = s.newStream(chatStream, a.body.(chatResponse).ID, req.Model, text, called, fr, req.StreamOptions)
	}
	s.serve(w, r, &a)
}

func isPacked(system []string) bool {
	for _, s := range system {
		if isPackedSystem(s) {
			return true
		}
	}
	return false
}

// packedReply answers each item as if it came alone, then applies the pack
// faults, and cuts the reply at maxTokens as a model would.
func (s *Server) packedReply(items []string, budget, maxTokens int) (string, bool) {
	if budget == 0 {
		budget = s.cfg.ReplyTokens
	}
	if s.draw() < s.cfg.PackUnparseableRate {
		return cutReply("I'm sorry, but I can only answer one question at a time. Could you send them separately?", maxTokens)
	}
	var sb strings.Builder
	sb.WriteString(`{"answers":[`)
	first := true
	for i, it := range items {
		u := s.draw()
		if u < s.cfg.PackMissingRate {
			continue
		}
		if !first {
			sb.WriteByte(',')
		}
		first = false
		if u < s.cfg.PackMissingRate+s.cfg.PackMalformedRate {
			fmt.Fprintf(&sb, `{"id":%d,"answer":%d}`, i+1, 1000+i)
			continue
		}
		text, _ := Reply(it, budget, s.cfg.ReplyTokens)
		b, _ := json.Marshal(packedAnswer{ID: i + 1, Answer: text}) // ints and strings only
		sb.Write(b)
	}
	sb.WriteString("]}")
	return cutReply(sb.String(), maxTokens)
}

func cutReply(text string, maxTokens int) (string, bool) {
	if limit := 4 * maxTokens; len(text) > limit {
		return cutRunes(text, limit), true
	}
	return text, false
}

func finish(cut bool) string {
	if cut {
		return "length"
	}
	return "stop"
}

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

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	out := modelList{Object: "list", Data: make([]modelInfo, 0, len(s.cfg.Models))}
	for _, m := range s.cfg.Models {
		out.Data = append(out.Data, modelInfo{ID: m, Object: "model", OwnedBy: "llmsim"})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	m := r.PathValue("model")
	if !s.checkModel(w, m) {
		return
	}
	writeJSON(w, http.StatusOK, modelInfo{ID: m, Object: "model", OwnedBy: "llmsim"})
}

// begin counts the call, checks its key and decodes its body into req.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, req any) bool {
	s.st.requests.Add(1)
	if !s.authorized(w, r) {
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				fmt.Sprintf("Request body exceeds %d bytes.", s.cfg.MaxRequestBytes))
			return false
		}
		badRequest(w, "", "Could not read the request body.")
		return false
	}
	if err := json.Unmarshal(body, req); err != nil {
		badRequest(w, "", "We could not parse the JSON body of your request: "+cutRunes(err.Error(), 120))
		return false
	}
	return true
}

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) == 1 {
		return true
	}
	writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
	return false
}

func (s *Server) checkModel(w http.ResponseWriter, model string) bool {
	if s.models[model] {
		return true
	}
	if model == "" {
		badRequest(w, "model", "'model' must be set.")
		return false
	}
	writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
		"The model `"+cutRunes(model, 64)+"` does not exist or you do not have access to it.")
	return false
}

// serve takes the call through the rate limits, a concurrency slot, the
// fault draw and the latency model, then writes a.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, a *answer) {
	h := w.Header()
	if batchCall(r) {
		s.st.ok.Add(1)
		s.st.promptTokens.Add(int64(a.promptTokens))
		s.st.completionTokens.Add(int64(a.completionTokens))
		writeJSON(w, http.StatusOK, a.body)
		return
	}
	if s.limited(w, r, a) {
		return
	}
	ctx := r.Context()
	if s.sem != nil {
		select {
		case s.sem <- struct{}{}:
			defer func() { <-s.sem }()
		case <-ctx.Done():
			return
		case <-s.closed:
			panic(http.ErrAbortHandler)
		}
	}
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.st.maxInFlight.Load(); n > m && !s.st.maxInFlight.CompareAndSwap(m, n); m = s.st.maxInFlight.Load() {
	}

	if s.injectFault(w, r, a) {
		return
	}
	c := &s.cfg
	if a.stream != nil {
		s.serveStream(w, r, a)
		return
	}
	if a.anthropic != nil && a.anthropic.stream != nil {
		s.serveAnthropicStream(w, r, a)
		return
	}
	d := c.Latency + time.Duration(a.completionTokens)*c.PerToken + time.Duration(a.promptTokens)*c.PerPromptToken
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.closed:
			t.Stop()
			panic(http.ErrAbortHandler)
		}
	}
	s.st.ok.Add(1)
	s.st.inputs.Add(int64(a.inputs))
	s.st.promptTokens.Add(int64(a.promptTokens))
	s.st.completionTokens.Add(int64(a.completionTokens))
	if a.packedItems > 0 {
		s.st.packed.Add(1)
		s.st.packedItems.Add(int64(a.packedItems))
	}
	h.Set("openai-processing-ms", strconv.FormatInt(d.Milliseconds(), 10))
	writeJSON(w, http.StatusOK, a.body)
}

// limited books a's cost against the rate limits and, when it is over
// them, answers as the provider does (429 and its headers) and returns
// true.
func (s *Server) limited(w http.ResponseWriter, r *http.Request, a *answer) bool {
	h := w.Header()
	v := verdict{ok: true}
	if r.Context().Value(batchCallKey{}) == nil { // an Anthropic batch's calls are outside the limits
		v = s.lim.take(a.cost, h)
	}
	if a.anthropic != nil {
		if !v.ok && !v.tooLarge {
			retryAfterHeaders(h, v.retryAfter)
		}
		anthropicHeaders(h, s.cfg.Now())
		if !v.ok {
			s.st.rateLimited.Add(1)
			s.cfg.Logger.Debug("rate limited", "path", r.URL.Path, "reason", v.reason, "retry_after", v.retryAfter)
			anthropicRateLimited(w, v, a.cost, s.cfg.TPM)
			return true
		}
	}
	if !v.ok {
		s.st.rateLimited.Add(1)
		if v.tooLarge {
			writeError(w, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded",
				fmt.Sprintf("Request too large: limit %d tokens per min, requested %d.", s.cfg.TPM, a.cost))
			return true
		}
		retryAfterHeaders(h, v.retryAfter)
		s.cfg.Logger.Debug("rate limited", "path", r.URL.Path, "reason", v.reason, "retry_after", v.retryAfter)
		writeError(w, http.StatusTooManyRequests, v.reason, "rate_limit_exceeded",
			fmt.Sprintf("Rate limit reached for %s per min. Please try again in %s.", v.reason, FormatReset(v.retryAfter)))
		return true
	}
	return false
}

// injectFault draws whether the call meets a fault (ErrorRate,
// TimeoutRate, ResetRate, MalformedRate) and, if so, answers with it and
// returns true.
func (s *Server) injectFault(w http.ResponseWriter, r *http.Request, a *answer) bool {
	h := w.Header()
	ctx := r.Context()
	c := &s.cfg
	switch u := s.draw(); {
	case u < c.ErrorRate:
		s.st.errors.Add(1)
		if a.anthropic != nil {
			s.anthropicFault(w, r)
			return true
		}
		status := []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable}[int(s.draw()*3)%3]
		c.Logger.Debug("fault: server error", "path", r.URL.Path, "status", status)
		writeError(w, status, "server_error", "", "The server had an error while processing your request. Sorry about that!")
		return true
	case u < c.ErrorRate+c.TimeoutRate:
		s.st.timeouts.Add(1)
		c.Logger.Debug("fault: hang", "path", r.URL.Path)
		select {
		case <-ctx.Done():
		case <-s.closed:
		}
		panic(http.ErrAbortHandler)
	case u < c.ErrorRate+c.TimeoutRate+c.ResetRate:
		s.st.resets.Add(1)
		c.Logger.Debug("fault: connection reset", "path", r.URL.Path)
		reset(w)
		return true
	case u < c.ErrorRate+c.TimeoutRate+c.ResetRate+c.MalformedRate:
		s.st.malformed.Add(1)
		c.Logger.Debug("fault: malformed body", "path", r.URL.Path)
		body, _ := json.Marshal(a.body)
		if s.draw() < 0.5 {
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(body[:len(body)/2])
			return true
		}
		h.Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>")
		return true
	}
	return false
}

// draw returns the next number from the fault source, in [0, 1).
func (s *Server) draw() float64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64()
}

// reset closes the call's connection with a TCP RST, or aborts the call
// where the connection cannot be taken over (HTTP/2).
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends RST, not FIN
	}
	_ = conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "", "llmsim could not encode its answer.")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func badRequest(w http.ResponseWriter, param, msg string) {
	var p *string
	if param != "" {
		p = &param
	}
	writeErrorBody(w, http.StatusBadRequest, errorDetail{Message: msg, Type: "invalid_request_error", Param: p})
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var c *string
	if code != "" {
		c = &code
	}
	writeErrorBody(w, status, errorDetail{Message: msg, Type: typ, Code: c})
}

func writeErrorBody(w http.ResponseWriter, status int, d errorDetail) {
	body, _ := json.Marshal(errorBody{Error: d}) // strings only
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
