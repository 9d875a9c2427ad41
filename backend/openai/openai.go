package openai

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

// Backend sends Batcher's batches to one OpenAI-compatible upstream. It
// implements batcher.Backend and is safe for concurrent use.
type Backend struct {
	cfg     *config
	client  *http.Client
	owned   *http.Transport // the pooled transport New made, if any
	st      counters
	log     *slog.Logger
	logs    *upstream.LogLimiter
	ps      packState
	schemas schema.Cache     // strict schemas, to check answers (richchat.go)
	now     func() time.Time // time.Now; tests change it before use
	// streamHdr is a streamed call's headers, built once by New; each
	// call sends a clone (nil: built per call).
	streamHdr http.Header
	timers    upstream.CallTimers // a streamed call's timer (stream)
}

var _ batcher.Backend = (*Backend)(nil)

// New returns a Backend for cfg, or an error naming every bad field. It
// reads the API key from cfg.APIKeyEnv now.
func New(cfg Config) (*Backend, error) {
	rc, err := resolve(cfg, true)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		cfg:  rc,
		log:  rc.Logger,
		logs: upstream.NewLogLimiter(rc.LogInterval),
		ps:   packState{routes: make(map[string]*routePack)},
		now:  time.Now,
	}
	rt := cfg.Transport
	if rt == nil {
		b.owned = upstream.NewTransport(rc.MaxIdleConns, cfg.TLS)
		rt = b.owned
	}
	b.client = upstream.NewClient(rt, "openai", rc.Propagator, rc.TracerProvider)
	b.streamHdr = make(http.Header)
	b.setStreamHeaders(b.streamHdr)
	return b, nil
}

// Close drops the idle connections of the pooled transport. Dispatch may
// still be called; it opens new ones.
func (b *Backend) Close() error {
	if b.owned != nil {
		b.owned.CloseIdleConnections()
	}
	return nil
}

// Stats counts the backend's upstream work.
type Stats struct {
	Calls       int64 // upstream HTTP calls made
	Failed      int64 // of them, calls that failed
	Packs       int64 // packed chat calls
	PackedItems int64 // requests sent in packs
	Resent      int64 // packed requests re-sent singly after their pack failed them
	// PackFailed counts packs that failed as a whole (an error status, a
	// network failure, an unreadable reply); their requests were re-sent
	// singly.
	PackFailed int64
	// PackPauses counts the times a route stopped packing because its
	// packs kept failing (PackConfig.PauseAfter).
	PackPauses int64
	// PackPausedRoutes is how many routes are not packing now.
	PackPausedRoutes int64
}

type counters struct {
	calls, failed, packs, packedItems, resent atomic.Int64
	packFailed, packPauses, pausedRoutes      atomic.Int64
}

// Stats returns the counters so far.
func (b *Backend) Stats() Stats {
	return Stats{
		Calls: b.st.calls.Load(), Failed: b.st.failed.Load(), Packs: b.st.packs.Load(),
		PackedItems: b.st.packedItems.Load(), Resent: b.st.resent.Load(),
		PackFailed: b.st.packFailed.Load(), PackPauses: b.st.packPauses.Load(), PackPausedRoutes: b.st.pausedRoutes.Load(),
	}
}

// Dispatch sends the batch upstream: embeddings and completions as one
// native batch call, chat as one call per request (fan-out) or in packs.
// Per-request failures land in out[i].Err; Dispatch returns an error when
// every request failed, the first of them.
func (b *Backend) Dispatch(ctx context.Context, batch *batcher.Batch, out []batcher.Response) error {
	if len(out) != len(batch.Requests) {
		return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "batch and responses differ in length",
			Err: fmt.Errorf("openai: %d requests, %d responses", len(batch.Requests), len(out))}
	}
	if len(out) == 0 {
		return nil
	}
	seen := &limitsSeen{}
	var err error
	switch batch.Op {
	case batcher.OpEmbedding:
		err = b.embed(ctx, seen, batch, out)
	case batcher.OpCompletion:
		err = b.complete(ctx, seen, batch, out)
	case batcher.OpChat:
		b.chat(ctx, seen, batch, out)
		err = allFailed(ctx, out)
	default:
		return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "unsupported operation " + batch.Op.String()}
	}
	if rl := seen.get(); rl != nil {
		batch.RateLimit = rl
	}
	return err
}

// UpstreamCalls tells the dispatcher how many upstream requests a batch of
// n of route makes, for its RPM budget: one for embeddings and completions;
// for chat, one per request, or one per pack of up to Pack.MaxItems when the
// route packs.
func (b *Backend) UpstreamCalls(route string, op batcher.Operation, n int) int {
	if op != batcher.OpChat {
		return 1
	}
	if n > 1 && b.cfg.packs(route) && !b.packPaused(route) {
		return (n + b.cfg.Pack.MaxItems - 1) / b.cfg.Pack.MaxItems
	}
	return n
}

// SharedParams tells the core which generation parameters one batch of
// route must share (batcher.ParamSharer): none for a chat route that does
// not pack, whose requests go upstream one call each with their own
// parameters; all but ParamRich for a packing route (a pack is one call,
// and a rich request never packs); all of them for
// completions and embeddings (one call carries the batch).
func (b *Backend) SharedParams(route, _ string, op batcher.Operation) batcher.ParamSet {
	if op == batcher.OpChat {
		if !b.cfg.packs(route) {
			return 0
		}
		// Rich requests never pack (packable): they need not split lanes.
		return batcher.AllParams &^ batcher.ParamRich
	}
	return batcher.AllParams
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

// allFailed returns the first error when every response failed.
func allFailed(ctx context.Context, out []batcher.Response) error {
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

// post sends one call for items requests of batch and decodes a 2xx
// answer's JSON body into resp. What a successful answer says of the
// upstream's limits goes to seen; a failed one's is in its
// *batcher.UpstreamError, and the failure is logged (rate-limited). Each
// call is reported to the core (Batch.UpstreamCall), so that a fan-out's
// or a pack's calls count one by one.
func (b *Backend) post(ctx context.Context, seen *limitsSeen, batch *batcher.Batch, items int, path string, body, resp any) error {
	b.st.calls.Add(1)
	start := time.Now()
	rl, err := b.do(ctx, path, body, resp)
	batch.UpstreamCall(time.Since(start), err)
	if err != nil {
		b.st.failed.Add(1)
		b.logFailure(ctx, path, batch, items, err)
		return err
	}
	seen.add(rl)
	return nil
}

func (b *Backend) do(ctx context.Context, path string, body, resp any) (*batcher.RateLimitInfo, error) {
	ep := b.cfg.endpointPath(path)
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "request cannot be encoded as JSON", Err: err}
	}
	raw = withExtra(raw, body)
	cctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, b.cfg.endpoint(path), bytes.NewReader(raw))
	if err != nil {
		return nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "request cannot be built", Err: err}
	}
	b.setHeaders(req.Header, "application/json")
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
		if errors.As(err, &se) && len(bytes.TrimSpace(data)) > 0 && (data[0] == '{' || data[0] == '[') {
			return nil, invalidResponse(res.StatusCode, ep, "truncated or malformed JSON body", err)
		}
		if errors.As(err, &se) || len(data) == 0 {
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

// finishReason maps OpenAI's finish reasons.
func finishReason(s string) batcher.FinishReason {
	switch s {
	case "stop", "eos", "end_turn", "tool_calls", "function_call":
		return batcher.FinishStop
	case "length", "max_tokens":
		return batcher.FinishLength
	case "content_filter":
		return batcher.FinishContentFilter
	}
	return batcher.FinishUnspecified
}
