package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/schema"
)

// Provider is a simulated LLM provider. It implements batcher.Backend.
type Provider struct {
	cfg    Config
	limits *limits

	rngMu sync.Mutex
	rng   *rand.Rand // guarded by rngMu

	inFlight atomic.Int64
	samples  atomic.Uint64 // numbers the calls that sample, from the seed
	stats    counters
	schemas  schema.Cache // compiled JSON Schemas of requests (chat.go)
}

var (
	_ batcher.Backend         = (*Provider)(nil)
	_ batcher.UpstreamCaller  = (*Provider)(nil)
	_ batcher.FeatureDeclarer = (*Provider)(nil)
)

// New returns a provider for cfg, or an error naming every bad field.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if cfg.Dimensions == 0 {
		cfg.Dimensions = DefaultDimensions
	}
	models := make(map[string]Model, len(cfg.Models))
	for name, m := range cfg.Models {
		if m.Dimensions == 0 {
			m.Dimensions = cfg.Dimensions
		}
		models[name] = m
	}
	cfg.Models = models
	seed := uint64(cfg.Seed)
	return &Provider{
		cfg:    cfg,
		limits: newLimits(&cfg),
		rng:    rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)),
	}, nil
}

// Config returns the provider's configuration with its defaults resolved.
func (p *Provider) Config() Config { return p.cfg }

// UpstreamCalls reports how many upstream requests a batch of n inputs
// makes: one when native, n with FanOut.
func (p *Provider) UpstreamCalls(_ string, _ batcher.Operation, n int) int {
	if p.cfg.FanOut {
		return n
	}
	return 1
}

// SharedParams tells the core which generation parameters a batch shares
// (batcher.ParamSharer): none with FanOut, where each input is a call of
// its own with its own parameters; all of them otherwise.
func (p *Provider) SharedParams(_, _ string, _ batcher.Operation) batcher.ParamSet {
	if p.cfg.FanOut {
		return 0
	}
	return batcher.AllParams
}

// Dispatch answers a batch: one native call carrying every input, or with
// FanOut one concurrent call per input. It returns the call's error when a
// native call fails as a whole (a 429, a 400 for a batch beyond MaxBatchSize,
// an injected 503, or ctx ending); otherwise it sets out[i].Err for each
// input that failed on its own. When RPM or TPM is set, it reports what is
// left of them in b.RateLimit, as x-ratelimit-* headers would. It returns
// only once every sub-call has ended, and keeps nothing of b.
func (p *Provider) Dispatch(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	if len(out) != len(b.Requests) {
		return &batcher.UpstreamError{
			Class:   batcher.ClassInvalidRequest,
			Message: fmt.Sprintf("sim: %d responses for %d requests", len(out), len(b.Requests)),
		}
	}
	if !p.cfg.FanOut || len(b.Requests) == 1 {
		err := p.call(ctx, b.Model, b.Op, b.MaxTokens, b.Requests, out, nil)
		if err == nil {
			b.RateLimit = p.limits.info(time.Now())
		}
		return err
	}
	defer func() { b.RateLimit = p.limits.info(time.Now()) }()
	var wg sync.WaitGroup
	for i := range b.Requests {
		wg.Go(func() {
			start := time.Now()
			err := p.call(ctx, b.Model, b.Op, b.MaxTokens, b.Requests[i:i+1], out[i:i+1], nil)
			if err != nil {
				out[i] = batcher.Response{Err: err}
			}
			b.UpstreamCall(time.Since(start), err) // one simulated call per input
		})
	}
	wg.Wait()
	return nil
}

// Call makes one direct call for one input, bypassing any batcher: what a
// naive client that sends each request straight to the provider does. in.Op
// says the operation; p.MaxTokens 0 means DefaultMaxTokens. The error is the
// call's or the input's; it wraps a *batcher.UpstreamError except when ctx
// was cancelled.
func (p *Provider) Call(ctx context.Context, model string, in batcher.Input, params batcher.Params) (batcher.Response, error) {
	req := [1]*batcher.Request{{Input: in, Params: params}}
	var out [1]batcher.Response
	if err := p.call(ctx, model, in.Op, 0, req[:], out[:], nil); err != nil {
		return batcher.Response{Err: err}, err
	}
	return out[0], out[0].Err
}

// call is one upstream call carrying reqs. It fills out for the inputs that
// got an answer and returns the error of a call that failed as a whole.
// With w set (Stream: one request), the answer goes to w word by word at
// the streaming pace instead of after the call's latency.
func (p *Provider) call(ctx context.Context, model string, op batcher.Operation, maxTokens int32, reqs []*batcher.Request, out []batcher.Response, w batcher.DeltaWriter) error {
	p.stats.calls.Add(1)
	p.stats.items.Add(int64(len(reqs)))
	if err := p.admit(ctx, len(reqs)); err != nil {
		return err
	}
	defer p.inFlight.Add(-1)
	resolved, err := p.book(op, maxTokens, reqs)
	if err != nil {
		return err
	}
	failCall, failItem := p.draw(len(reqs))
	if failCall {
		if err := wait(ctx, p.cfg.BaseLatency); err != nil {
			p.stats.canceled.Add(1)
			return err
		}
		p.stats.failures.Add(1)
		return &batcher.UpstreamError{
			Class:      batcher.ClassServer,
			StatusCode: http.StatusServiceUnavailable,
			Message:    "simulated server error: the model is overloaded, try again",
		}
	}
	// Answer every input, then wait out the call's latency: the longest
	// output decides it, since a batch's inputs are generated together.
	longest, promptSum, completionSum := p.answer(model, op, reqs, resolved, failItem, out)
	if w != nil && out[0].Err == nil {
		if err := p.stream(ctx, w, &out[0]); err != nil {
			clear(out)
			p.stats.canceled.Add(1)
			return err
		}
	} else if err := wait(ctx, p.cfg.BaseLatency+time.Duration(longest)*p.cfg.PerToken); err != nil {
		clear(out)
		p.stats.canceled.Add(1)
		return err
	}
	p.stats.succeeded.Add(1)
	p.stats.promptTokens.Add(promptSum)
	p.stats.completionTokens.Add(completionSum)
	return nil
}

// admit lets a call of n inputs in: within the batch size and the
// concurrency limit, its context live. On nil the call is in flight (the
// caller leaves with p.inFlight.Add(-1)).
func (p *Provider) admit(ctx context.Context, n int) error {
	if p.cfg.MaxBatchSize > 0 && n > p.cfg.MaxBatchSize {
		p.stats.invalid.Add(1)
		return &batcher.UpstreamError{
			Class:      batcher.ClassInvalidRequest,
			StatusCode: http.StatusBadRequest,
			Message:    fmt.Sprintf("batch of %d inputs exceeds max batch size %d", n, p.cfg.MaxBatchSize),
		}
	}
	if err := ctx.Err(); err != nil {
		p.stats.canceled.Add(1)
		return ctxError(err)
	}
	// Concurrency first: a provider turns away a call it cannot start before
	// it books the call against its rate limits.
	inFlight, ok := p.enter()
	if !ok {
		p.stats.rateLimited.Add(1)
		info := p.limits.info(time.Now())
		if info == nil {
			info = &batcher.RateLimitInfo{RemainingRequests: -1, RemainingTokens: -1}
		}
		info.RetryAfter = max(p.cfg.BaseLatency, time.Millisecond)
		return &batcher.UpstreamError{
			Class:      batcher.ClassRateLimit,
			StatusCode: http.StatusTooManyRequests,
			Message:    fmt.Sprintf("too many concurrent requests: limit %d", p.cfg.MaxConcurrency),
			RateLimit:  info,
		}
	}
	p.stats.observeConcurrency(inFlight)
	return nil
}

// book books the tokens a provider books up front against its rate
// limits: prompts plus what each input may generate. It returns each
// input's max tokens.
func (p *Provider) book(op batcher.Operation, maxTokens int32, reqs []*batcher.Request) ([]int32, error) {
	resolved := make([]int32, len(reqs))
	tokens := 0
	for i, r := range reqs {
		mt := maxTokens
		if mt <= 0 {
			mt = r.Params.MaxTokens
		}
		if mt <= 0 {
			mt = DefaultMaxTokens
		}
		resolved[i] = mt
		tokens += int(promptTokens(&r.Input))
		if op != batcher.OpEmbedding {
			tokens += int(mt)
		}
	}
	if err := p.limits.take(time.Now(), tokens); err != nil {
		if batcher.ClassOf(err) == batcher.ClassRateLimit {
			p.stats.rateLimited.Add(1)
		} else {
			p.stats.invalid.Add(1)
		}
		return nil, err
	}
	return resolved, nil
}

// answer fills out with each input's answer (or its failure: an input of
// another operation, or one failItem fails) and returns the longest
// output's tokens and the usage of the inputs answered.
func (p *Provider) answer(model string, op batcher.Operation, reqs []*batcher.Request, resolved []int32, failItem []bool, out []batcher.Response) (longest int32, promptSum, completionSum int64) {
	for i, r := range reqs {
		in := &r.Input
		switch {
		case in.Op != op || op < batcher.OpChat || op > batcher.OpEmbedding:
			p.stats.itemFailures.Add(1)
			out[i] = batcher.Response{Err: &batcher.UpstreamError{
				Class:      batcher.ClassInvalidRequest,
				StatusCode: http.StatusBadRequest,
				Message:    fmt.Sprintf("input %d: %s input sent to a %s call", i, in.Op, op),
			}}
			continue
		case failItem != nil && failItem[i]:
			p.stats.itemFailures.Add(1)
			out[i] = batcher.Response{Err: &batcher.UpstreamError{
				Class:      batcher.ClassServer,
				StatusCode: http.StatusInternalServerError,
				Message:    fmt.Sprintf("simulated failure of input %d", i),
			}}
			continue
		}
		u := batcher.Usage{PromptTokens: promptTokens(in)}
		if op == batcher.OpEmbedding {
			out[i] = batcher.Response{Embedding: embed(model, in.Text, p.dimensions(model)), Usage: u}
		} else {
			var sample uint64
			if t := r.Params.Temperature; t != nil && *t > 0 && r.Params.Seed == nil {
				sample = p.samples.Add(1)<<1 ^ uint64(p.cfg.Seed)<<32 | 1
			}
			c := generate(model, in, &r.Params, resolved[i], sample)
			u.CompletionTokens = c.tokens
			out[i] = batcher.Response{Text: c.text, FinishReason: c.finish, Usage: u}
			if op == batcher.OpChat && r.Rich() {
				resp, generated, slowest, err := p.answerChat(model, r, c, resolved[i], sample)
				if err != nil {
					p.stats.itemFailures.Add(1)
					out[i] = batcher.Response{Err: err}
					continue
				}
				u.CompletionTokens = generated
				resp.Usage = u
				out[i] = resp
				c.tokens = slowest
			}
			longest = max(longest, c.tokens)
		}
		promptSum += int64(u.PromptTokens)
		completionSum += int64(u.CompletionTokens)
	}
	return longest, promptSum, completionSum
}

// draw decides whether a call of n inputs fails as a whole, or else which of
// its inputs fail (nil: none).
func (p *Provider) draw(n int) (failCall bool, failItem []bool) {
	if p.cfg.FailureRate == 0 && p.cfg.PartialFailureRate == 0 {
		return false, nil
	}
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	if p.cfg.FailureRate > 0 && p.rng.Float64() < p.cfg.FailureRate {
		return true, nil
	}
	if p.cfg.PartialFailureRate > 0 {
		for i := range n {
			if p.rng.Float64() < p.cfg.PartialFailureRate {
				if failItem == nil {
					failItem = make([]bool, n)
				}
				failItem[i] = true
			}
		}
	}
	return false, failItem
}

// enter books a call in flight and returns how many are, or reports false
// when MaxConcurrency are already.
func (p *Provider) enter() (int64, bool) {
	limit := int64(p.cfg.MaxConcurrency)
	if limit == 0 {
		return p.inFlight.Add(1), true
	}
	for {
		n := p.inFlight.Load()
		if n >= limit {
			return n, false
		}
		if p.inFlight.CompareAndSwap(n, n+1) {
			return n + 1, true
		}
	}
}

func (p *Provider) dimensions(model string) int {
	if m, ok := p.cfg.Models[model]; ok {
		return m.Dimensions
	}
	return p.cfg.Dimensions
}

// wait waits d, or less when ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctxError(ctx.Err())
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxError(ctx.Err())
	}
}

// ctxError turns a context's end into the call's error: a deadline is an
// upstream timeout, a cancellation stays itself.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &batcher.UpstreamError{Class: batcher.ClassTimeout, Message: "deadline exceeded before the call completed", Err: err}
	}
	return err
}
