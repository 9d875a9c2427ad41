package llmsim

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults.
const (
	DefaultReplyTokens     = 24
	DefaultEmbeddingDim    = 32
	DefaultMaxRequestBytes = 16 << 20
	// MaxInputs bounds the inputs of one embeddings or completions call,
	// as OpenAI does.
	MaxInputs = 2048
	// DefaultBatchMaxRequests and DefaultBatchMaxFileBytes are OpenAI's
	// limits of one batch input file.
	DefaultBatchMaxRequests  = 50_000
	DefaultBatchMaxFileBytes = 200 << 20
)

// DefaultModels are served when Config.Models is empty.
var DefaultModels = []string{"sim-chat", "sim-completion", "sim-embedding"}

// Config sets the simulator's behaviour. The zero value is a fast,
// unlimited, faultless simulator.
type Config struct {
	// Models lists the model names served; a call naming another gets a 404
	// model_not_found. Every model serves every endpoint. Default
	// DefaultModels.
	Models []string
	// APIKey, when set, must come as "Authorization: Bearer <key>";
	// otherwise the call gets a 401.
	APIKey string

	// Latency is the base time of every call. PerToken adds time per
	// generated token and PerPromptToken per prompt token. Default 0.
	Latency        time.Duration
	PerToken       time.Duration
	PerPromptToken time.Duration
	// MaxConcurrency bounds the calls being served; the rest wait for a
	// slot. Default 0: no bound.
	MaxConcurrency int

	// RPM and TPM limit requests and tokens per minute with token buckets
	// that start full, as providers do. A call's token cost is its prompt
	// tokens plus its max_tokens (or ReplyTokens). Default 0: no limit.
	RPM int
	TPM int

	// ReplyTokens is the length of a full answer. Default
	// DefaultReplyTokens.
	ReplyTokens int
	// EmbeddingDim is the length of every embedding. Default
	// DefaultEmbeddingDim.
	EmbeddingDim int
	// MaxRequestBytes bounds a request body. Default DefaultMaxRequestBytes.
	MaxRequestBytes int64

	// Seed seeds the random source of the faults.
	Seed uint64
	// The fault rates, each from 0 to 1, drawn once per call (after the
	// rate limits) and adding up to at most 1: ErrorRate answers a 500, 502
	// or 503; TimeoutRate hangs until the client gives up; ResetRate resets
	// the connection; MalformedRate sends a truncated or non-JSON body with
	// status 200.
	ErrorRate     float64
	TimeoutRate   float64
	ResetRate     float64
	MalformedRate float64
	// The packed-answer fault rates, each from 0 to 1. PackUnparseableRate,
	// drawn per packed call, replaces the reply with prose. PackMissingRate
	// and PackMalformedRate, drawn per item, drop the item's answer or make
	// it a number.
	PackMissingRate     float64
	PackMalformedRate   float64
	PackUnparseableRate float64
	// The structured-answer fault rates, each from 0 to 1, drawn per
	// call: ToolCallMalformedRate cuts a tool call's arguments short (not
	// JSON); SchemaViolationRate answers a json_schema request, or a tool
	// call, with JSON that breaks its schema.
	ToolCallMalformedRate float64
	SchemaViolationRate   float64
	// The mid-stream fault rates of streamed calls ("stream": true), each
	// from 0 to 1, drawn once per streamed call and adding up to at most 1.
	// Each strikes after the first content chunk (at a point drawn among
	// the answer's chunks): StreamCutRate closes the connection without
	// [DONE]; StreamStallRate stops sending, holding the connection open
	// until the client gives up; StreamMalformedRate sends a chunk that is
	// not JSON and ends the stream.
	StreamCutRate       float64
	StreamStallRate     float64
	StreamMalformedRate float64
	// OnStreamClosed, when set, is called when a client closes a streamed
	// call's connection before the answer's end (tests wait on it).
	OnStreamClosed func()

	// The batch API (/v1/files, /v1/batches; batchapi.go). BatchTime is
	// how long a batch takes from its creation to its end (default 0: it
	// ends at the first look); its request counts grow evenly meanwhile.
	// BatchFailRate and BatchExpireRate, each from 0 to 1 and adding up to
	// at most 1, are drawn per line: a failed line goes to the error file
	// answered 500; an expired line goes there as batch_expired, and the
	// batch ends "expired". BatchMaxRequests and BatchMaxFileBytes are the
	// limits of one file (default OpenAI's 50,000 and 200 MB): a larger
	// upload is refused, a batch over more lines fails. BatchQueueTokens,
	// when positive, bounds the tokens (prompt estimate plus max_tokens) of
	// the batches not ended: a batch past it fails token_limit_exceeded.
	BatchTime         time.Duration
	BatchFailRate     float64
	BatchExpireRate   float64
	BatchMaxRequests  int
	BatchMaxFileBytes int64
	BatchQueueTokens  int64
	// HoldBatch, when set, is asked before a batch goes on, with its id,
	// metadata (nil for a Message Batch) and how many of its requests have
	// run: a Message Batch before each request, an OpenAI batch in
	// progress at each look (its creation's answer included). A channel it
	// returns (nil: none) holds the batch in progress where it is until
	// the channel is closed or the batch is cancelled (tests hold a batch
	// at a point of their choosing, rather than for a time).
	HoldBatch func(id string, metadata map[string]string, done int) <-chan struct{}

	// Now, when set, is the clock of the rate limits and of the batch API
	// (tests).
	Now func() time.Time
	// Logger receives a debug line for every fault and rate-limited call.
	// Default: none.
	Logger *slog.Logger
}

func (c Config) resolve() (Config, error) {
	var errs []error
	if len(c.Models) == 0 {
		c.Models = DefaultModels
	}
	for i, m := range c.Models {
		if m == "" {
			errs = append(errs, fmt.Errorf("llmsim: models[%d]: must not be empty", i))
		}
	}
	durations := []struct {
		name string
		d    time.Duration
	}{{"latency", c.Latency}, {"per token", c.PerToken}, {"per prompt token", c.PerPromptToken}}
	for _, d := range durations {
		if d.d < 0 {
			errs = append(errs, fmt.Errorf("llmsim: %s: must not be negative, got %v", d.name, d.d))
		}
	}
	counts := []struct {
		name string
		n    int
	}{{"max concurrency", c.MaxConcurrency}, {"rpm", c.RPM}, {"tpm", c.TPM}}
	for _, n := range counts {
		if n.n < 0 {
			errs = append(errs, fmt.Errorf("llmsim: %s: must not be negative, got %d", n.name, n.n))
		}
	}
	if c.ReplyTokens == 0 {
		c.ReplyTokens = DefaultReplyTokens
	}
	if c.ReplyTokens < 1 {
		errs = append(errs, fmt.Errorf("llmsim: reply tokens: must be at least 1, got %d", c.ReplyTokens))
	}
	if c.EmbeddingDim == 0 {
		c.EmbeddingDim = DefaultEmbeddingDim
	}
	if c.EmbeddingDim < 1 || c.EmbeddingDim > 65536 {
		errs = append(errs, fmt.Errorf("llmsim: embedding dim: must be 1 to 65536, got %d", c.EmbeddingDim))
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxRequestBytes < 1 {
		errs = append(errs, fmt.Errorf("llmsim: max request bytes: must be at least 1, got %d", c.MaxRequestBytes))
	}
	rates := []struct {
		name string
		v    float64
	}{
		{"error rate", c.ErrorRate}, {"timeout rate", c.TimeoutRate}, {"reset rate", c.ResetRate},
		{"malformed rate", c.MalformedRate}, {"pack missing rate", c.PackMissingRate},
		{"pack malformed rate", c.PackMalformedRate}, {"pack unparseable rate", c.PackUnparseableRate},
		{"tool call malformed rate", c.ToolCallMalformedRate}, {"schema violation rate", c.SchemaViolationRate},
		{"batch fail rate", c.BatchFailRate}, {"batch expire rate", c.BatchExpireRate},
		{"stream cut rate", c.StreamCutRate}, {"stream stall rate", c.StreamStallRate}, {"stream malformed rate", c.StreamMalformedRate},
	}
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) {
			errs = append(errs, fmt.Errorf("llmsim: %s: must be 0 to 1, got %v", r.name, r.v))
		}
	}
	if sum := c.ErrorRate + c.TimeoutRate + c.ResetRate + c.MalformedRate; sum > 1 {
		errs = append(errs, fmt.Errorf("llmsim: fault rates: error, timeout, reset and malformed must add up to at most 1, got %v", sum))
	}
	if sum := c.StreamCutRate + c.StreamStallRate + c.StreamMalformedRate; sum > 1 {
		errs = append(errs, fmt.Errorf("llmsim: stream fault rates: cut, stall and malformed must add up to at most 1, got %v", sum))
	}
	if c.BatchFailRate+c.BatchExpireRate > 1 {
		errs = append(errs, fmt.Errorf("llmsim: batch fail and expire rates: must add up to at most 1, got %v", c.BatchFailRate+c.BatchExpireRate))
	}
	if c.BatchMaxRequests == 0 {
		c.BatchMaxRequests = DefaultBatchMaxRequests
	}
	if c.BatchMaxFileBytes == 0 {
		c.BatchMaxFileBytes = DefaultBatchMaxFileBytes
	}
	if c.BatchTime < 0 || c.BatchMaxRequests < 0 || c.BatchMaxFileBytes < 0 || c.BatchQueueTokens < 0 {
		errs = append(errs, fmt.Errorf("llmsim: batch time, max requests, max file bytes and queue tokens: must not be negative"))
	}
	if c.PackMissingRate+c.PackMalformedRate > 1 {
		errs = append(errs, fmt.Errorf("llmsim: pack missing and malformed rates: must add up to at most 1, got %v", c.PackMissingRate+c.PackMalformedRate))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, errors.Join(errs...)
}
