package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/schema"
	"github.com/batcherhq/batcher/internal/upstream"
)

// messagesPath is the Messages API's endpoint under the base URL.
const messagesPath = "/v1/messages"

// Backend sends Batcher's chat batches to Anthropic's Messages API, one
// call per request. It implements batcher.Backend, batcher.Streamer,
// batcher.FeatureDeclarer and batcher.ParamSharer, and is safe for
// concurrent use.
type Backend struct {
	cfg     *config
	client  *http.Client
	owned   *http.Transport // the pooled transport New made, if any
	calls   atomic.Int64
	failed  atomic.Int64
	log     *slog.Logger
	logs    *upstream.LogLimiter
	schemas schema.Cache        // strict tool schemas, to check answers
	timers  upstream.CallTimers // a streamed call's timer (stream)
}

var (
	_ batcher.Backend         = (*Backend)(nil)
	_ batcher.Streamer        = (*Backend)(nil)
	_ batcher.FeatureDeclarer = (*Backend)(nil)
	_ batcher.ParamSharer     = (*Backend)(nil)
)

// New returns a Backend for cfg, or an error naming every bad field. It
// reads the API key from cfg.APIKeyEnv now.
func New(cfg Config) (*Backend, error) {
	rc, err := resolve(cfg, true)
	if err != nil {
		return nil, err
	}
	b := &Backend{cfg: rc, log: rc.Logger, logs: upstream.NewLogLimiter(rc.LogInterval)}
	rt := cfg.Transport
	if rt == nil {
		b.owned = upstream.NewTransport(rc.MaxIdleConns, cfg.TLS)
		rt = b.owned
	}
	b.client = upstream.NewClient(rt, "anthropic", rc.Propagator, rc.TracerProvider)
	return b, nil
}

// Close drops the idle connections of the pooled transport.
func (b *Backend) Close() error {
	if b.owned != nil {
		b.owned.CloseIdleConnections()
	}
	return nil
}

// Stats counts the backend's upstream work.
type Stats struct {
	Calls  int64 // upstream HTTP calls made
	Failed int64 // of them, calls that failed
}

// Stats returns the counters so far.
func (b *Backend) Stats() Stats { return Stats{Calls: b.calls.Load(), Failed: b.failed.Load()} }

// GenAIProvider names the provider in gen_ai.provider.name
// (batcher.ProviderNamer): "anthropic", the OpenTelemetry GenAI
// convention's value.
func (b *Backend) GenAIProvider() string { return "anthropic" }

// chatFeatures is what the Messages API carries: tools (tool_use and
// tool_result blocks), images, the end user (metadata.user_id) and extra
// body fields (top_k, thinking, ...). It has no response_format, message
// names, logprobs, n, penalties, logit_bias, reasoning_effort nor seed:
// the core refuses those at admission, naming the field.
const chatFeatures = batcher.FeatureTools | batcher.FeatureImages | batcher.FeatureUser | batcher.FeatureExtraBody

// Features tells the core what the backend honours (FeatureDeclarer): on
// chat routes chatFeatures; the Messages API serves nothing else.
func (b *Backend) Features(_, _ string, op batcher.Operation) batcher.Features {
	if op == batcher.OpChat {
		return chatFeatures
	}
	return 0
}

// SharedParams is none (batcher.ParamSharer): every request goes upstream
// as its own call with its own parameters.
func (b *Backend) SharedParams(_, _ string, _ batcher.Operation) batcher.ParamSet { return 0 }

// UpstreamCalls tells the dispatcher that a batch of n makes n calls.
func (b *Backend) UpstreamCalls(_ string, _ batcher.Operation, n int) int { return n }

// Dispatch sends each request of a chat batch as its own Messages call, at
// most MaxFanOut at once. Per-request failures land in out[i].Err;
// Dispatch returns an error when every request failed, the first of them.
func (b *Backend) Dispatch(ctx context.Context, batch *batcher.Batch, out []batcher.Response) error {
	if len(out) != len(batch.Requests) {
		return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "batch and responses differ in length",
			Err: fmt.Errorf("anthropic: %d requests, %d responses", len(batch.Requests), len(out))}
	}
	if len(out) == 0 {
		return nil
	}
	if batch.Op != batcher.OpChat {
		return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest,
			Message: "the Anthropic Messages API serves chat only, not " + batch.Op.String()}
	}
	seen := &limitsSeen{}
	sem := make(chan struct{}, b.cfg.MaxFanOut)
	var wg sync.WaitGroup
	for i := range batch.Requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i] = batcher.Response{Err: transportError(ctx, "", ctx.Err())}
				return
			}
			defer func() { <-sem }()
			out[i] = b.single(ctx, seen, batch, i)
		}()
	}
	wg.Wait()
	if rl := seen.get(); rl != nil {
		batch.RateLimit = rl
	}
	for i := range out {
		if out[i].Err == nil {
			return nil
		}
	}
	if err := ctx.Err(); errors.Is(err, context.Canceled) {
		return err
	}
	return out[0].Err
}

// maxTokensOf returns request i's max_tokens: its own, the batch's (the
// route's default), or the backend's.
func (b *Backend) maxTokensOf(batch *batcher.Batch, i int) int32 {
	if mt := batch.Requests[i].Params.MaxTokens; mt > 0 {
		return mt
	}
	if batch.MaxTokens > 0 {
		return batch.MaxTokens
	}
	return b.cfg.MaxTokens
}

// request builds request i's call, or the invalid-request error naming
// what Anthropic cannot carry.
func (b *Backend) request(batch *batcher.Batch, i int) (*messagesRequest, error) {
	req, err := buildRequest(batch.Model, batch.Requests[i], b.maxTokensOf(batch, i))
	if err != nil {
		return nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: err.Error()}
	}
	return req, nil
}

// single sends request i alone.
func (b *Backend) single(ctx context.Context, seen *limitsSeen, batch *batcher.Batch, i int) batcher.Response {
	req, err := b.request(batch, i)
	if err != nil {
		return batcher.Response{Err: err}
	}
	b.calls.Add(1)
	start := time.Now()
	var resp messagesResponse
	rl, err := b.do(ctx, req, &resp)
	batch.UpstreamCall(time.Since(start), err)
	if err != nil {
		b.failed.Add(1)
		b.logFailure(ctx, batch, err)
		return batcher.Response{Err: err}
	}
	seen.add(rl)
	out, err := b.answer(&resp, batch.Requests[i])
	if err != nil {
		return batcher.Response{Err: invalidResponse(http.StatusOK, b.cfg.endpointPath(messagesPath), err.Error(), nil)}
	}
	return out
}

// answer reads a Messages reply: its text blocks joined, its tool_use
// blocks as tool calls (checked against the request's tools), its stop
// reason and usage.
func (b *Backend) answer(resp *messagesResponse, r *batcher.Request) (batcher.Response, error) {
	if resp.Type != "" && resp.Type != "message" {
		return batcher.Response{}, fmt.Errorf("a reply of type %q, not message", clip(resp.Type, 32))
	}
	out := batcher.Response{FinishReason: finishReason(resp.StopReason), Usage: usageOf(resp.Usage)}
	var (
		text  bytes.Buffer
		calls []batcher.ToolCall
	)
	for _, c := range resp.Content {
		switch c.Type {
		case "text":
			text.WriteString(c.Text)
		case "tool_use":
			args := string(c.Input)
			if len(c.Input) == 0 {
				args = "{}"
			}
			if err := b.checkCall(r, c.Name, args); err != nil {
				return batcher.Response{}, err
			}
			calls = append(calls, batcher.ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
		}
	}
	out.Text, out.Chat = text.String(), batcher.NewChatOutput(calls, "", nil, nil)
	if resp.StopReason == "" {
		return batcher.Response{}, errors.New("no stop_reason")
	}
	if out.Text == "" && len(calls) == 0 && out.FinishReason == batcher.FinishUnspecified {
		return batcher.Response{}, fmt.Errorf("no content and an unknown stop_reason %q", clip(resp.StopReason, 32))
	}
	return out, nil
}

// checkCall checks a tool call against the request's tools: a tool it
// offered, arguments that are a JSON object, and that validate against a
// strict tool's schema (Anthropic has no strict mode of its own: Batcher
// checks the answer instead, and an answer that breaks it is an
// invalid_response, retried as such).
func (b *Backend) checkCall(r *batcher.Request, name, args string) error {
	if r == nil { // a batch's result, read without its request: only the shape is checked
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
			return fmt.Errorf("tool call %q: input is not a JSON object", clip(name, 64))
		}
		return nil
	}
	var t *batcher.Tool
	tools := r.ChatOptions().Tools
	for i := range tools {
		if tools[i].Name == name {
			t = &tools[i]
		}
	}
	if t == nil {
		return fmt.Errorf("a call of %q, which is not a tool of the request", clip(name, 64))
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return fmt.Errorf("tool call %q: input is not a JSON object", clip(name, 64))
	}
	if t.Strict && t.Parameters != nil {
		if err := b.schemas.Validate(t.Parameters, []byte(args)); err != nil {
			return fmt.Errorf("tool call %q: input breaks the strict schema: %w", clip(name, 64), err)
		}
	}
	return nil
}

// usageOf converts a wire usage: the input counts every input token,
// cached or not.
func usageOf(u *wireUsage) batcher.Usage {
	if u == nil {
		return batcher.Usage{}
	}
	c := func(n int64) int32 { return int32(max(0, min(n, 1<<31-1))) }
	in := max(u.InputTokens, 0) + max(u.CacheCreationInputTokens, 0) + max(u.CacheReadInputTokens, 0)
	return batcher.Usage{PromptTokens: c(in), CompletionTokens: c(u.OutputTokens)}
}

// newHTTPRequest builds the POST of body to the Messages endpoint with
// every header.
func (b *Backend) newHTTPRequest(ctx context.Context, body *messagesRequest) (*http.Request, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "request cannot be encoded as JSON", Err: err}
	}
	raw = withExtra(raw, body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.endpoint(messagesPath), bytes.NewReader(raw))
	if err != nil {
		return nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "request cannot be built", Err: err}
	}
	h := req.Header
	for k, v := range b.cfg.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "batcher")
	h.Set("anthropic-version", b.cfg.Version)
	if b.cfg.Beta != "" {
		h.Set("anthropic-beta", b.cfg.Beta)
	}
	if b.cfg.apiKey != "" {
		h.Set("x-api-key", b.cfg.apiKey)
	}
	return req, nil
}

// do makes one unstreamed call and decodes a 2xx answer into resp.
func (b *Backend) do(ctx context.Context, body *messagesRequest, resp *messagesResponse) (*batcher.RateLimitInfo, error) {
	ep := b.cfg.endpointPath(messagesPath)
	cctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	req, err := b.newHTTPRequest(cctx, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	res, err := b.client.Do(req)
	if err != nil {
		return nil, transportError(ctx, ep, err)
	}
	defer func() { _ = res.Body.Close() }()
	rl := ParseRateLimit(res.Header, time.Now())
	if rl != nil && b.cfg.OnRateLimit != nil {
		b.cfg.OnRateLimit(*rl)
	}
	data, err := b.readBody(ctx, ep, res)
	if err != nil {
		return nil, err
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return nil, b.statusError(res.StatusCode, ep, data, rl)
	}
	if err := json.Unmarshal(data, resp); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se) && len(bytes.TrimSpace(data)) > 0 && data[0] == '{':
			return nil, invalidResponse(res.StatusCode, ep, "truncated or malformed JSON body", err)
		case errors.As(err, &se) || len(data) == 0:
			return nil, invalidResponse(res.StatusCode, ep, "body that is not JSON", err)
		}
		return nil, invalidResponse(res.StatusCode, ep, "JSON of an unexpected shape", err)
	}
	return rl, nil
}

// readBody reads at most MaxResponseBytes of the body.
func (b *Backend) readBody(ctx context.Context, ep string, res *http.Response) ([]byte, error) {
	limit := b.cfg.MaxResponseBytes
	data, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	switch {
	case err == nil && int64(len(data)) > limit:
		return nil, invalidResponse(res.StatusCode, ep, fmt.Sprintf("body over %d bytes", limit), nil)
	case err == nil:
		return data, nil
	case ctx.Err() == nil && errors.Is(err, io.ErrUnexpectedEOF):
		return nil, invalidResponse(res.StatusCode, ep, "body cut short", err)
	}
	return nil, transportError(ctx, ep, err)
}

// limitsSeen keeps the most restrictive rate-limit report of one
// dispatch's successful calls.
type limitsSeen struct {
	mu sync.Mutex
	rl *batcher.RateLimitInfo
}

func (l *limitsSeen) add(rl *batcher.RateLimitInfo) {
	if rl == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rl == nil {
		c := *rl
		l.rl = &c
		return
	}
	least := func(a, b int64) int64 {
		if a < 0 || (b >= 0 && b < a) {
			return b
		}
		return a
	}
	l.rl.RemainingRequests = least(l.rl.RemainingRequests, rl.RemainingRequests)
	l.rl.RemainingTokens = least(l.rl.RemainingTokens, rl.RemainingTokens)
	l.rl.LimitRequests = max(l.rl.LimitRequests, rl.LimitRequests)
	l.rl.LimitTokens = max(l.rl.LimitTokens, rl.LimitTokens)
	l.rl.ResetRequests = max(l.rl.ResetRequests, rl.ResetRequests)
	l.rl.ResetTokens = max(l.rl.ResetTokens, rl.ResetTokens)
	l.rl.RetryAfter = max(l.rl.RetryAfter, rl.RetryAfter)
}

func (l *limitsSeen) get() *batcher.RateLimitInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rl
}
