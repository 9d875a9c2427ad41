package llmsim

import (
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"

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
