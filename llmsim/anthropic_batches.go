package llmsim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Anthropic's Message Batches: POST /v1/messages/batches takes up to
// AnthropicBatchMaxRequests requests, each a custom_id and the params of a
// /v1/messages call; GET /v1/messages/batches/{id} reports the batch
// (processing_status in_progress, canceling or ended, request_counts);
// GET /v1/messages/batches/{id}/results streams one JSON line per request
// once it has ended ({"custom_id", "result": {"type": "succeeded",
// "message"} or errored, canceled, expired}); POST .../{id}/cancel cancels
// the requests not yet run; GET /v1/messages/batches lists them, newest
// first (limit, after_id, before_id). Each request is answered as the same call to
// /v1/messages would be, faults included (ErrorRate makes errored lines),
// but outside the RPM and TPM limits, as Anthropic's batches are;
// BatchFailRate and BatchExpireRate, drawn per request, make errored (500
// api_error) and expired lines. The batch runs in the background as soon
// as it is created, one request after another, spread evenly over
// BatchTime (its processing time: it ends no sooner); Config.HoldBatch may
// hold it before any request.

// AnthropicBatchMaxRequests is Anthropic's bound on one batch's requests.
const AnthropicBatchMaxRequests = 100_000

var customIDRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

type anthropicBatch struct {
	id                           string
	n                            uint64 // its place in creation order
	created                      time.Time
	cancelled                    bool      // cancel asked
	ended                        time.Time // zero: running
	cancelAt                     time.Time
	stop                         context.CancelFunc // ends the run (cancel)
	ids                          []string
	params                       []json.RawMessage
	results                      []json.RawMessage // nil: not run
	succeeded, errored, canceled int
	expired                      int
}

type anthropicBatches struct {
	mu      sync.Mutex
	batches map[string]*anthropicBatch
}

func (s *Server) anthropicBatchesOf() *anthropicBatches {
	s.abOnce.Do(func() { s.ab = &anthropicBatches{batches: map[string]*anthropicBatch{}} })
	return s.ab
}

func (s *Server) createMessageBatch(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if !s.beginAnthropic(w, r, &req) {
		return
	}
	switch n := len(req.Requests); {
	case n == 0:
		anthropicBadRequest(w, "requests: at least one request is required")
		return
	case n > AnthropicBatchMaxRequests:
		anthropicBadRequest(w, fmt.Sprintf("requests: at most %d requests, got %d", AnthropicBatchMaxRequests, n))
		return
	}
	n := s.seq.Add(1)
	b := &anthropicBatch{id: "msgbatch_sim" + strconv.FormatUint(n, 10), n: n, created: s.cfg.Now()}
	seen := make(map[string]bool, len(req.Requests))
	for i, q := range req.Requests {
		if !customIDRE.MatchString(q.CustomID) {
			anthropicBadRequest(w, fmt.Sprintf("requests.%d.custom_id: must match ^[a-zA-Z0-9_-]{1,64}$", i))
			return
		}
		if seen[q.CustomID] {
			anthropicBadRequest(w, fmt.Sprintf("requests.%d.custom_id: %q is used twice", i, q.CustomID))
			return
		}
		seen[q.CustomID] = true
		if len(q.Params) == 0 || q.Params[0] != '{' {
			anthropicBadRequest(w, fmt.Sprintf("requests.%d.params: Field required", i))
			return
		}
		b.ids = append(b.ids, q.CustomID)
		b.params = append(b.params, q.Params)
	}
	b.results = make([]json.RawMessage, len(b.ids))
	ctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	ab := s.anthropicBatchesOf()
	ab.mu.Lock()
	ab.batches[b.id] = b
	view := s.batchView(b)
	ab.mu.Unlock()
	go s.runMessageBatch(ctx, b, r.Header.Get(anthropicVersionHeader))
	writeJSON(w, http.StatusOK, view)
}

// runMessageBatch answers b's requests one by one, each as /v1/messages
// would, until they are all answered or the batch is cancelled.
func (s *Server) runMessageBatch(ctx context.Context, b *anthropicBatch, version string) {
	ab := s.anthropicBatchesOf()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	for i := range b.ids {
		if !pace(ctx, start, s.cfg.BatchTime*time.Duration(i)/time.Duration(len(b.ids))) {
			break
		}
		if h := s.cfg.HoldBatch; h != nil {
			if ch := h(b.id, nil, i); ch != nil {
				select {
				case <-ch:
				case <-ctx.Done(): // cancelled, or the server closed
				}
			}
		}
		ab.mu.Lock()
		stop := b.cancelled
		ab.mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		var params map[string]json.RawMessage
		_ = json.Unmarshal(b.params[i], &params)
		var line json.RawMessage
		u := s.draw()
		if u < s.cfg.BatchFailRate+s.cfg.BatchExpireRate {
			if u < s.cfg.BatchFailRate {
				line = errored(http.StatusInternalServerError, []byte(`{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`))
			} else {
				line = json.RawMessage(`{"type":"expired"}`)
			}
		} else if _, ok := params["stream"]; ok && string(params["stream"]) != "false" {
			line = errored(http.StatusBadRequest, []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"stream: not supported in batches"}}`))
		} else {
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/messages", bytes.NewReader(b.params[i]))
			req.Header.Set(anthropicVersionHeader, version)
			req.Header.Set("x-api-key", s.cfg.APIKey)
			req = req.WithContext(context.WithValue(ctx, batchCallKey{}, true))
			rec := httptest.NewRecorder()
			func() {
				defer func() { _ = recover() }() // a hang or reset fault aborts the handler
				s.messages(rec, req)
			}()
			if ctx.Err() != nil {
				break // cancelled mid-call: the request did not run
			}
			if rec.Code == http.StatusOK && json.Valid(rec.Body.Bytes()) {
				line, _ = json.Marshal(map[string]any{"type": "succeeded", "message": json.RawMessage(rec.Body.Bytes())})
			} else {
				line = errored(rec.Code, rec.Body.Bytes())
			}
		}
		out, _ := json.Marshal(map[string]any{"custom_id": b.ids[i], "result": line})
		ab.mu.Lock()
		b.results[i] = out
		switch {
		case bytes.Contains(line, []byte(`"type":"succeeded"`)):
			b.succeeded++
		case bytes.Equal(line, []byte(`{"type":"expired"}`)):
			b.expired++
		default:
			b.errored++
		}
		ab.mu.Unlock()
	}
	ab.mu.Lock()
	stop := b.cancelled
	ab.mu.Unlock()
	if !stop {
		pace(ctx, start, s.cfg.BatchTime) // it ends no sooner than BatchTime after its start
	}
	ab.mu.Lock()
	defer ab.mu.Unlock()
	for i := range b.results {
		if b.results[i] == nil {
			b.results[i], _ = json.Marshal(map[string]any{"custom_id": b.ids[i], "result": map[string]string{"type": "canceled"}})
			b.canceled++
		}
	}
	b.ended = s.cfg.Now()
}

// pace waits until at after start; false when ctx ends first.
func pace(ctx context.Context, start time.Time, at time.Duration) bool {
	d := time.Until(start.Add(at))
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// batchCallKey marks a /v1/messages call made for a batch: outside the
// rate limits.
type batchCallKey struct{}

// errored is an errored result line from a call's status and body.
func errored(status int, body []byte) json.RawMessage {
	var e json.RawMessage = body
	if !json.Valid(body) {
		e, _ = json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": "api_error",
			"message": fmt.Sprintf("HTTP %d with a body that is not JSON", status)}})
	}
	out, _ := json.Marshal(map[string]any{"type": "errored", "error": e})
	return out
}

// batchView is b as GET /v1/messages/batches/{id} shows it.
func (s *Server) batchView(b *anthropicBatch) map[string]any {
	status := "in_progress"
	if b.cancelled {
		status = "canceling"
	}
	processing := len(b.ids) - b.succeeded - b.errored - b.canceled - b.expired
	v := map[string]any{
		"id": b.id, "type": "message_batch", "processing_status": status,
		"request_counts": map[string]int{"processing": processing, "succeeded": b.succeeded, "errored": b.errored,
			"canceled": b.canceled, "expired": b.expired},
		"created_at": b.created.UTC().Format(time.RFC3339Nano), "expires_at": b.created.Add(24 * time.Hour).UTC().Format(time.RFC3339Nano),
		"ended_at": nil, "cancel_initiated_at": nil, "results_url": nil,
	}
	if !b.cancelAt.IsZero() {
		v["cancel_initiated_at"] = b.cancelAt.UTC().Format(time.RFC3339Nano)
	}
	if !b.ended.IsZero() {
		v["processing_status"] = "ended"
		v["ended_at"] = b.ended.UTC().Format(time.RFC3339Nano)
		v["results_url"] = "/v1/messages/batches/" + b.id + "/results"
	}
	return v
}

// messageBatch finds the batch the path names, answering 404 when none.
func (s *Server) messageBatch(w http.ResponseWriter, r *http.Request) *anthropicBatch {
	if !s.anthropicAuthorized(w, r) {
		return nil
	}
	ab := s.anthropicBatchesOf()
	ab.mu.Lock()
	b := ab.batches[r.PathValue("id")]
	ab.mu.Unlock()
	if b == nil {
		anthropicError(w, http.StatusNotFound, "not_found_error", "message batch "+cutRunes(r.PathValue("id"), 64)+" not found")
	}
	return b
}

func (s *Server) getMessageBatch(w http.ResponseWriter, r *http.Request) {
	b := s.messageBatch(w, r)
	if b == nil {
		return
	}
	ab := s.anthropicBatchesOf()
	ab.mu.Lock()
	v := s.batchView(b)
	ab.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

// listMessageBatches is GET /v1/messages/batches: the batches newest
// first, limit (1 to 1000, default 20) a page, the page after after_id
// (older) or before before_id (newer).
func (s *Server) listMessageBatches(w http.ResponseWriter, r *http.Request) {
	if !s.anthropicAuthorized(w, r) {
		return
	}
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			anthropicBadRequest(w, "limit: an integer from 1 to 1000, got "+cutRunes(v, 32))
			return
		}
		limit = n
	}
	ab := s.anthropicBatchesOf()
	ab.mu.Lock()
	defer ab.mu.Unlock()
	all := make([]*anthropicBatch, 0, len(ab.batches))
	for _, b := range ab.batches {
		all = append(all, b)
	}
	slices.SortFunc(all, func(a, b *anthropicBatch) int { return cmp.Compare(b.n, a.n) })
	from, to := 0, len(all)
	if id := q.Get("after_id"); id != "" {
		from = slices.IndexFunc(all, func(b *anthropicBatch) bool { return b.id == id }) + 1
		if from == 0 {
			from = len(all)
		}
	}
	if id := q.Get("before_id"); id != "" {
		if to = slices.IndexFunc(all, func(b *anthropicBatch) bool { return b.id == id }); to < 0 {
			to = 0
		}
		from = max(0, min(from, to-limit))
	}
	to = min(to, from+limit)
	from = min(from, to)
	page := make([]map[string]any, 0, to-from)
	for _, b := range all[from:to] {
		page = append(page, s.batchView(b))
	}
	more := to < len(all) // older ones left
	if q.Get("before_id") != "" {
		more = from > 0 // newer ones left
	}
	v := map[string]any{"data": page, "has_more": more, "first_id": nil, "last_id": nil}
	if len(page) > 0 {
		v["first_id"], v["last_id"] = all[from].id, all[to-1].id
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) cancelMessageBatch(w http.ResponseWriter, r *http.Request) {
	b := s.messageBatch(w, r)
	if b == nil {
		return
	}
	ab := s.anthropicBatchesOf()
	ab.mu.Lock()
	if b.ended.IsZero() && !b.cancelled {
		b.cancelled, b.cancelAt = true, s.cfg.Now()
		b.stop()
	}
	v := s.batchView(b)
	ab.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) messageBatchResults(w http.ResponseWriter, r *http.Request) {
	b := s.messageBatch(w, r)
	if b == nil {
		return
	}
	ab := s.anthropicBatchesOf()
	ab.mu.Lock()
	ended := !b.ended.IsZero()
	lines := b.results // complete and no longer written once ended
	ab.mu.Unlock()
	if !ended {
		anthropicBadRequest(w, "message batch "+b.id+" has not ended: its results are not ready")
		return
	}
	w.Header().Set("Content-Type", "application/x-jsonl")
	w.WriteHeader(http.StatusOK)
	for _, l := range lines {
		_, _ = w.Write(append(l, '\n'))
	}
}

// anthropicAuthorized checks x-api-key and anthropic-version for a call
// without a body.
func (s *Server) anthropicAuthorized(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.APIKey != "" && r.Header.Get("x-api-key") != s.cfg.APIKey {
		anthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return false
	}
	if r.Header.Get(anthropicVersionHeader) == "" {
		anthropicBadRequest(w, "anthropic-version: header is required")
		return false
	}
	return true
}
