package anthropic

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// Message Batches (POST /v1/messages/batches): up to BatchMaxRequests
// Messages requests under custom ids, answered within 24 hours at half
// price. The input streams into the create call's body (Anthropic has no
// file API): EncodeBatchRequest writes one request a line, CreateBatch
// sends the lines as the body's requests array without holding them;
// GetBatch polls; BatchResults streams the results (JSON lines) one by
// one, mapped back by custom id; CancelBatch cancels.

// Anthropic's bounds on one batch.
const (
	BatchMaxRequests = 100_000
	BatchMaxBytes    = 256 << 20
	batchesPath      = "/v1/messages/batches"
)

// BatchRequest is one request of a batch.
type BatchRequest struct {
	CustomID string
	Model    string
	Req      *batcher.Request
	// MaxTokens is max_tokens when Req sets none (its route's default).
	MaxTokens int32
}

// EncodeBatchRequest writes r as one line ({"custom_id", "params"}) to w,
// returning the bytes written. A request the Messages API cannot carry is
// an error wrapping batcher.ErrInvalid, and nothing is written.
func (b *Backend) EncodeBatchRequest(w io.Writer, r *BatchRequest) (int, error) {
	mt := r.Req.Params.MaxTokens
	if mt <= 0 {
		mt = r.MaxTokens
	}
	if mt <= 0 {
		mt = b.cfg.MaxTokens
	}
	req, err := buildRequest(r.Model, r.Req, mt)
	if err != nil {
		return 0, fmt.Errorf("%w: custom_id %s: %w", batcher.ErrInvalid, r.CustomID, err)
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return 0, fmt.Errorf("%w: custom_id %s: %w", batcher.ErrInvalid, r.CustomID, err)
	}
	raw = withExtra(raw, req)
	id, _ := json.Marshal(r.CustomID)
	line := make([]byte, 0, len(raw)+len(id)+32)
	line = append(append(append(line, `{"custom_id":`...), id...), `,"params":`...)
	line = append(append(line, raw...), "}\n"...)
	return w.Write(line)
}

// MessageBatch is a batch as Anthropic reports it.
type MessageBatch struct {
	ID string `json:"id"`
	// ProcessingStatus is in_progress, canceling or ended.
	ProcessingStatus string `json:"processing_status"`
	RequestCounts    struct {
		Processing int64 `json:"processing"`
		Succeeded  int64 `json:"succeeded"`
		Errored    int64 `json:"errored"`
		Canceled   int64 `json:"canceled"`
		Expired    int64 `json:"expired"`
	} `json:"request_counts"`
	CreatedAt         time.Time  `json:"created_at"`
	ExpiresAt         time.Time  `json:"expires_at"`
	EndedAt           *time.Time `json:"ended_at"`
	CancelInitiatedAt *time.Time `json:"cancel_initiated_at"`
	ResultsURL        string     `json:"results_url"`
}

// Ended reports whether the batch's results can be read.
func (m *MessageBatch) Ended() bool { return m.ProcessingStatus == "ended" }

// CreateBatch creates a batch from lines, EncodeBatchRequest's output,
// streamed into the body as its requests array.
func (b *Backend) CreateBatch(ctx context.Context, lines io.Reader) (*MessageBatch, error) {
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, `{"requests":[`)
		sc := bufio.NewScanner(lines)
		sc.Buffer(make([]byte, 0, 64<<10), BatchMaxBytes)
		first := true
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			if !first {
				if _, err := pw.Write([]byte{','}); err != nil {
					return
				}
			}
			first = false
			if _, err := pw.Write(line); err != nil {
				return
			}
		}
		if err := sc.Err(); err != nil {
			pw.CloseWithError(err)
			return
		}
		_, _ = io.WriteString(pw, `]}`)
		_ = pw.Close()
	}()
	defer func() { _ = pr.Close() }() // ends the writer if the call ends first
	var m MessageBatch
	if err := b.batchCall(ctx, http.MethodPost, batchesPath, pr, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// GetBatch returns the batch id.
func (b *Backend) GetBatch(ctx context.Context, id string) (*MessageBatch, error) {
	var m MessageBatch
	if err := b.batchCall(ctx, http.MethodGet, batchesPath+"/"+url.PathEscape(id), nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// ListBatches pages through GET /v1/messages/batches (newest first) and
// returns the batches created at or after since.
func (b *Backend) ListBatches(ctx context.Context, since time.Time) ([]*MessageBatch, error) {
	var out []*MessageBatch
	after := ""
	for range 1000 {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after_id", after)
		}
		var page struct {
			Data    []MessageBatch `json:"data"`
			HasMore bool           `json:"has_more"`
			LastID  string         `json:"last_id"`
		}
		if err := b.batchCall(ctx, http.MethodGet, batchesPath+"?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		for i := range page.Data {
			if page.Data[i].CreatedAt.Before(since) {
				return out, nil
			}
			out = append(out, &page.Data[i])
		}
		if !page.HasMore || len(page.Data) == 0 {
			break
		}
		after = page.Data[len(page.Data)-1].ID
	}
	return out, nil
}

// CancelBatch asks Anthropic to cancel the batch id and returns it as it
// is then (canceling, or ended).
func (b *Backend) CancelBatch(ctx context.Context, id string) (*MessageBatch, error) {
	var m MessageBatch
	if err := b.batchCall(ctx, http.MethodPost, batchesPath+"/"+url.PathEscape(id)+"/cancel", nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// BatchResult is one line of an ended batch's results.
type BatchResult struct {
	CustomID string
	// Type is succeeded, errored, canceled or expired; Resp.Err is set
	// unless it is succeeded.
	Type string
	Resp batcher.Response
}

// BatchResults streams an ended batch's results to fn, one line at a
// time, until fn returns an error (BatchResults returns it).
func (b *Backend) BatchResults(ctx context.Context, m *MessageBatch, fn func(*BatchResult) error) error {
	if !m.Ended() {
		return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "message batch " + clip(m.ID, 64) + " has not ended"}
	}
	path := batchesPath + "/" + url.PathEscape(m.ID) + "/results"
	res, err := b.batchDo(ctx, http.MethodGet, path, nil, "application/x-jsonl")
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	ep := b.cfg.endpointPath(path)
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64<<10), int(min(b.cfg.MaxResponseBytes, 1<<30)))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		r, err := b.batchResult(line, ep)
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return transportError(ctx, ep, err)
	}
	return nil
}

// batchResult decodes one results line.
func (b *Backend) batchResult(line []byte, ep string) (*BatchResult, error) {
	var l struct {
		CustomID string `json:"custom_id"`
		Result   struct {
			Type    string           `json:"type"`
			Message messagesResponse `json:"message"`
			Error   json.RawMessage  `json:"error"`
		} `json:"result"`
	}
	if err := json.Unmarshal(line, &l); err != nil || l.CustomID == "" {
		return nil, invalidResponse(http.StatusOK, ep, "a results line that is not {custom_id, result}", err)
	}
	out := &BatchResult{CustomID: l.CustomID, Type: l.Result.Type}
	switch l.Result.Type {
	case "succeeded":
		resp, err := b.answer(&l.Result.Message, nil)
		if err != nil {
			resp.Err = invalidResponse(http.StatusOK, ep, err.Error(), nil)
		}
		out.Resp = resp
	case "errored":
		// The error is the body the same online call would have got.
		var inner struct {
			Error errorResponse `json:"error"`
		}
		body := l.Result.Error
		if json.Unmarshal(body, &inner) == nil && inner.Error.Error.Type != "" {
			body, _ = json.Marshal(inner.Error)
		}
		var e errorResponse
		_ = json.Unmarshal(body, &e)
		out.Resp.Err = b.statusError(errorStatus(e.Error.Type), ep, body, nil)
	case "canceled":
		out.Resp.Err = &batcher.UpstreamError{Class: batcher.ClassServer, Message: "the message batch was canceled before this request ran"}
	case "expired":
		out.Resp.Err = &batcher.UpstreamError{Class: batcher.ClassTimeout, Message: "the message batch expired before this request ran"}
	default:
		return nil, invalidResponse(http.StatusOK, ep, fmt.Sprintf("a result of type %q", clip(l.Result.Type, 32)), nil)
	}
	return out, nil
}

// errorStatus is the HTTP status of an Anthropic error type, for an
// errored batch line (which carries no status).
func errorStatus(typ string) int {
	switch typ {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "overloaded_error":
		return StatusOverloaded
	}
	return http.StatusInternalServerError
}

// batchCall makes one JSON call of the batches API and decodes a 2xx
// answer into out.
func (b *Backend) batchCall(ctx context.Context, method, path string, body io.Reader, out any) error {
	res, err := b.batchDo(ctx, method, path, body, "application/json")
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	ep := b.cfg.endpointPath(path)
	data, err := b.readBody(ctx, ep, res)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return invalidResponse(res.StatusCode, ep, "a body that is not the batch's JSON", err)
	}
	return nil
}

// batchDo sends one call of the batches API and returns its 2xx
// response, or the error of any other.
func (b *Backend) batchDo(ctx context.Context, method, path string, body io.Reader, accept string) (*http.Response, error) {
	ep := b.cfg.endpointPath(path)
	req, err := http.NewRequestWithContext(ctx, method, b.cfg.endpoint(path), body)
	if err != nil {
		return nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "request cannot be built", Err: err}
	}
	h := req.Header
	for k, v := range b.cfg.Headers {
		h.Set(k, v)
	}
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Accept", accept)
	h.Set("User-Agent", "batcher")
	h.Set("anthropic-version", b.cfg.Version)
	if b.cfg.Beta != "" {
		h.Set("anthropic-beta", b.cfg.Beta)
	}
	if b.cfg.apiKey != "" {
		h.Set("x-api-key", b.cfg.apiKey)
	}
	b.calls.Add(1)
	res, err := b.client.Do(req)
	if err != nil {
		b.failed.Add(1)
		return nil, transportError(ctx, ep, err)
	}
	rl := ParseRateLimit(res.Header, time.Now())
	if res.StatusCode < 200 || res.StatusCode > 299 {
		defer func() { _ = res.Body.Close() }()
		b.failed.Add(1)
		data, err := b.readBody(ctx, ep, res)
		if err != nil {
			return nil, err
		}
		return nil, b.statusError(res.StatusCode, ep, data, rl)
	}
	return res, nil
}
