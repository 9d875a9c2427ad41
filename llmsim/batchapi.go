package llmsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"
)

// OpenAI's Batch API: /v1/files (purpose batch) and /v1/batches. Files and
// batches live in memory. A batch validates its input at creation, runs for
// Config.BatchTime (its request counts growing evenly), and is answered at
// the first look after that: each line goes through the same handler as an
// online call, without the rate limits, faults or latency, then the batch
// fault rates decide which lines fail or expire.

type simFile struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	data      []byte
}

type batchCounts struct {
	Total     int64 `json:"total"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
}

type batchError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Line    *int   `json:"line,omitempty"`
}

type simBatch struct {
	mu            sync.Mutex        // guards the fields below while it runs
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Endpoint      string            `json:"endpoint"`
	InputFileID   string            `json:"input_file_id"`
	Window        string            `json:"completion_window"`
	Status        string            `json:"status"`
	OutputFileID  *string           `json:"output_file_id"`
	ErrorFileID   *string           `json:"error_file_id"`
	CreatedAt     int64             `json:"created_at"`
	InProgressAt  *int64            `json:"in_progress_at"`
	ExpiresAt     int64             `json:"expires_at"`
	CompletedAt   *int64            `json:"completed_at,omitempty"`
	CancelledAt   *int64            `json:"cancelled_at,omitempty"`
	Metadata      map[string]string `json:"metadata"`
	RequestCounts batchCounts       `json:"request_counts"`
	Errors        *struct {
		Object string       `json:"object"`
		Data   []batchError `json:"data"`
	} `json:"errors"`

	created time.Time
	lines   [][]byte // the input's lines, until the batch ends
	tokens  int64    // its cost against BatchQueueTokens
}

// batchState is the batch API's store.
type batchState struct {
	mu      sync.Mutex
	files   map[string]*simFile
	order   []*simFile // by creation
	batches map[string]*simBatch
	border  []*simBatch
	seq     int
	// Counters (Stats).
	uploads, creates, cancels, linesDone, answered int64
	overQueue                                      int64 // batches failed token_limit_exceeded
}

// BatchStats counts what the batch API did.
type BatchStats struct {
	// FilesUploaded counts files stored; FileNames how often each name was
	// uploaded (a name twice: an upload repeated).
	FilesUploaded int64
	FileNames     map[string]int
	// BatchesCreated counts batches created; Tags how often each metadata
	// set was (a set twice: a creation repeated).
	BatchesCreated int64
	Tags           map[string]int
	Cancelled      int64
	// Lines counts the lines of ended batches; Answered those answered
	// through the model endpoints (which count them in Stats too).
	Lines    int64
	Answered int64
	// OverQueue counts the batches that failed token_limit_exceeded: the
	// batches not ended held BatchQueueTokens already.
	OverQueue int64
	// MessageBatches counts Anthropic's Message Batches created.
	MessageBatches int
}

// BatchStats returns the batch API's counters so far.
func (s *Server) BatchStats() BatchStats {
	ab := s.anthropicBatchesOf()
	ab.mu.Lock()
	mb := len(ab.batches)
	ab.mu.Unlock()
	b := &s.bat
	b.mu.Lock()
	defer b.mu.Unlock()
	st := BatchStats{FilesUploaded: b.uploads, BatchesCreated: b.creates, Cancelled: b.cancels, Lines: b.linesDone, Answered: b.answered, OverQueue: b.overQueue, MessageBatches: mb,
		FileNames: map[string]int{}, Tags: map[string]int{}}
	for _, f := range b.order {
		if f.Purpose == "batch" {
			st.FileNames[f.Filename]++
		}
	}
	for _, x := range b.border {
		k, _ := json.Marshal(x.Metadata) // sorted keys
		st.Tags[string(k)]++
	}
	return st
}

func (s *Server) routeBatches() {
	s.bat.files, s.bat.batches = map[string]*simFile{}, map[string]*simBatch{}
	s.mux.HandleFunc("POST /v1/files", s.uploadFile)
	s.mux.HandleFunc("GET /v1/files", s.listFiles)
	s.mux.HandleFunc("GET /v1/files/{id}", s.getFile)
	s.mux.HandleFunc("GET /v1/files/{id}/content", s.fileContent)
	s.mux.HandleFunc("POST /v1/batches", s.createBatch)
	s.mux.HandleFunc("GET /v1/batches", s.listBatches)
	s.mux.HandleFunc("GET /v1/batches/{id}", s.getBatch)
	s.mux.HandleFunc("POST /v1/batches/{id}/cancel", s.cancelBatch)
}

func (s *Server) newID(prefix string) string {
	s.bat.seq++
	return prefix + strconv.Itoa(s.bat.seq)
}

func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	limit := s.cfg.BatchMaxFileBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20) // room for the form's other parts
	mr, err := r.MultipartReader()
	if err != nil {
		badRequest(w, "file", "Expected a multipart/form-data body: "+cutRunes(err.Error(), 80))
		return
	}
	f := &simFile{Object: "file"}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			badRequest(w, "file", "The upload was cut short: "+cutRunes(err.Error(), 80))
			return
		}
		switch p.FormName() {
		case "purpose":
			b, _ := io.ReadAll(io.LimitReader(p, 64))
			f.Purpose = string(b)
		case "file":
			f.Filename = p.FileName()
			data, err := io.ReadAll(io.LimitReader(p, limit+1))
			if err != nil {
				badRequest(w, "file", "The upload was cut short: "+cutRunes(err.Error(), 80))
				return
			}
			if int64(len(data)) > limit {
				badRequest(w, "file", fmt.Sprintf("File is larger than the maximum of %d bytes.", limit))
				return
			}
			f.data = data
		}
	}
	switch {
	case f.Purpose == "":
		badRequest(w, "purpose", "'purpose' must be set.")
		return
	case f.data == nil:
		badRequest(w, "file", "'file' must be set.")
		return
	}
	f.Bytes = int64(len(f.data))
	f.CreatedAt = s.cfg.Now().Unix()
	b := &s.bat
	b.mu.Lock()
	f.ID = s.newID("file-sim")
	b.files[f.ID] = f
	b.order = append(b.order, f)
	b.uploads++
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, f)
}

type listPage[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	FirstID string `json:"first_id,omitempty"`
	LastID  string `json:"last_id,omitempty"`
}

// page returns up to limit items newest first after the one with id after.
func page[T any](all []T, id func(T) string, r *http.Request) (listPage[T], bool) {
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return listPage[T]{}, false
		}
		limit = n
	}
	after := r.URL.Query().Get("after")
	out := listPage[T]{Object: "list", Data: []T{}}
	started := after == ""
	for i := len(all) - 1; i >= 0; i-- {
		if !started {
			started = id(all[i]) == after
			continue
		}
		if len(out.Data) == limit {
			out.HasMore = true
			break
		}
		out.Data = append(out.Data, all[i])
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = id(out.Data[0]), id(out.Data[n-1])
	}
	return out, true
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	purpose := r.URL.Query().Get("purpose")
	s.bat.mu.Lock()
	var fs []*simFile
	for _, f := range s.bat.order {
		if purpose == "" || f.Purpose == purpose {
			fs = append(fs, f)
		}
	}
	s.bat.mu.Unlock()
	p, ok := page(fs, func(f *simFile) string { return f.ID }, r)
	if !ok {
		badRequest(w, "limit", "'limit' must be 1 to 10000.")
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) file(w http.ResponseWriter, r *http.Request) *simFile {
	if !s.authorized(w, r) {
		return nil
	}
	s.bat.mu.Lock()
	f := s.bat.files[r.PathValue("id")]
	s.bat.mu.Unlock()
	if f == nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "No such File object: "+cutRunes(r.PathValue("id"), 64))
	}
	return f
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	if f := s.file(w, r); f != nil {
		writeJSON(w, http.StatusOK, f)
	}
}

func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) {
	if f := s.file(w, r); f != nil {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
		_, _ = w.Write(f.data)
	}
}

var batchEndpoints = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"}

func (s *Server) createBatch(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	var req struct {
		InputFileID string            `json:"input_file_id"`
		Endpoint    string            `json:"endpoint"`
		Window      string            `json:"completion_window"`
		Metadata    map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		badRequest(w, "", "We could not parse the JSON body of your request: "+cutRunes(err.Error(), 120))
		return
	}
	switch {
	case !slices.Contains(batchEndpoints, req.Endpoint):
		badRequest(w, "endpoint", "Invalid endpoint "+strconv.Quote(cutRunes(req.Endpoint, 64))+".")
		return
	case req.Window != "24h":
		badRequest(w, "completion_window", "Invalid completion_window: only '24h' is supported.")
		return
	case len(req.Metadata) > 16:
		badRequest(w, "metadata", "'metadata' may hold at most 16 entries.")
		return
	}
	s.bat.mu.Lock()
	f := s.bat.files[req.InputFileID]
	s.bat.mu.Unlock()
	if f == nil || f.Purpose != "batch" {
		badRequest(w, "input_file_id", "No batch file with id "+strconv.Quote(cutRunes(req.InputFileID, 64))+".")
		return
	}
	now := s.cfg.Now()
	b := &simBatch{Object: "batch", Endpoint: req.Endpoint, InputFileID: f.ID, Window: "24h", Status: "in_progress",
		CreatedAt: now.Unix(), ExpiresAt: now.Add(24 * time.Hour).Unix(), Metadata: req.Metadata, created: now}
	if b.Metadata == nil {
		b.Metadata = map[string]string{}
	}
	b.InProgressAt = &b.CreatedAt
	if errs := s.validate(b, f); len(errs) > 0 {
		b.Status, b.InProgressAt, b.lines = "failed", nil, nil
		b.Errors = &struct {
			Object string       `json:"object"`
			Data   []batchError `json:"data"`
		}{"list", errs}
	}
	if b.Status == "in_progress" && s.cfg.BatchQueueTokens > 0 {
		s.bat.mu.Lock()
		others := slices.Clone(s.bat.border)
		s.bat.mu.Unlock()
		var queued int64
		for _, o := range others { // a batch's lock is taken before the store's, never inside it
			s.advance(o)
			o.mu.Lock()
			if o.lines != nil {
				queued += o.tokens
			}
			o.mu.Unlock()
		}
		if queued+b.tokens > s.cfg.BatchQueueTokens {
			b.Status, b.InProgressAt, b.lines = "failed", nil, nil
			b.Errors = &struct {
				Object string       `json:"object"`
				Data   []batchError `json:"data"`
			}{"list", []batchError{{Code: "token_limit_exceeded", Message: fmt.Sprintf(
				"Enqueued token limit reached: %d tokens enqueued, limit %d, this batch %d.", queued, s.cfg.BatchQueueTokens, b.tokens)}}}
			s.bat.mu.Lock()
			s.bat.overQueue++
			s.bat.mu.Unlock()
		}
	}
	s.bat.mu.Lock()
	b.ID = s.newID("batch_sim")
	s.bat.batches[b.ID] = b
	s.bat.border = append(s.bat.border, b)
	s.bat.creates++
	s.bat.mu.Unlock()
	s.writeBatch(w, b)
}

// validate reads the input's lines as OpenAI does at validation.
func (s *Server) validate(b *simBatch, f *simFile) []batchError {
	var errs []batchError
	bad := func(line int, code, msg string) {
		if len(errs) < 100 {
			l := line
			errs = append(errs, batchError{Code: code, Message: msg, Line: &l})
		}
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(f.data))
	sc.Buffer(nil, int(s.cfg.MaxRequestBytes)+1<<10)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l struct {
			CustomID string          `json:"custom_id"`
			Method   string          `json:"method"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		var body struct {
			Model     string `json:"model"`
			MaxTokens int64  `json:"max_tokens"`
		}
		switch {
		case json.Unmarshal(raw, &l) != nil:
			bad(n, "invalid_json_line", "This line is not parseable as valid JSON.")
		case l.CustomID == "":
			bad(n, "missing_required_parameter", "custom_id must be set.")
		case seen[l.CustomID]:
			bad(n, "duplicate_custom_id", "The custom_id for this request is a duplicate of another request.")
		case l.Method != http.MethodPost:
			bad(n, "invalid_method", "method must be POST.")
		case l.URL != b.Endpoint:
			bad(n, "mismatched_endpoint", "The url of this line does not match the batch's endpoint.")
		case json.Unmarshal(l.Body, &body) != nil:
			bad(n, "invalid_request", "body must be a JSON object.")
		case !s.models[body.Model]:
			bad(n, "model_not_found", "The model of this line does not exist.")
		default:
			seen[l.CustomID] = true
			b.lines = append(b.lines, slices.Clone(raw))
			b.tokens += int64(Tokens(string(l.Body))) + max(body.MaxTokens, int64(s.cfg.ReplyTokens))
		}
	}
	if err := sc.Err(); err != nil {
		bad(n+1, "invalid_json_line", "A line is longer than the request limit.")
	}
	if len(b.lines) > s.cfg.BatchMaxRequests {
		errs = append(errs, batchError{Code: "too_many_requests", Message: fmt.Sprintf(
			"The batch input file has %d requests, more than the maximum of %d.", len(b.lines), s.cfg.BatchMaxRequests)})
	}
	if len(b.lines) == 0 && len(errs) == 0 {
		errs = append(errs, batchError{Code: "empty_file", Message: "The batch input file is empty."})
	}
	b.RequestCounts.Total = int64(len(b.lines))
	return errs
}

func (s *Server) batch(w http.ResponseWriter, r *http.Request) *simBatch {
	if !s.authorized(w, r) {
		return nil
	}
	s.bat.mu.Lock()
	b := s.bat.batches[r.PathValue("id")]
	s.bat.mu.Unlock()
	if b == nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "No batch found with id "+strconv.Quote(cutRunes(r.PathValue("id"), 64))+".")
	}
	return b
}

func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) {
	if b := s.batch(w, r); b != nil {
		s.writeBatch(w, b)
	}
}

func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	s.bat.mu.Lock()
	all := slices.Clone(s.bat.border)
	s.bat.mu.Unlock()
	p, ok := page(all, func(b *simBatch) string { return b.ID }, r)
	if !ok {
		badRequest(w, "limit", "'limit' must be 1 to 10000.")
		return
	}
	for _, b := range p.Data {
		s.advance(b)
	}
	out := listPage[json.RawMessage]{Object: p.Object, HasMore: p.HasMore, FirstID: p.FirstID, LastID: p.LastID}
	for _, b := range p.Data {
		b.mu.Lock()
		raw, _ := json.Marshal(b)
		b.mu.Unlock()
		out.Data = append(out.Data, raw)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) cancelBatch(w http.ResponseWriter, r *http.Request) {
	b := s.batch(w, r)
	if b == nil {
		return
	}
	s.advance(b)
	b.mu.Lock()
	switch b.Status {
	case "validating", "in_progress", "finalizing":
		b.Status = "cancelling"
		s.bat.mu.Lock()
		s.bat.cancels++
		s.bat.mu.Unlock()
	case "cancelling", "cancelled":
	default:
		st := b.Status
		b.mu.Unlock()
		writeError(w, http.StatusConflict, "invalid_request_error", "", "Cannot cancel a batch with status '"+st+"'.")
		return
	}
	b.mu.Unlock()
	s.writeBatch(w, b)
}

func (s *Server) writeBatch(w http.ResponseWriter, b *simBatch) {
	s.advance(b)
	b.mu.Lock()
	raw, err := json.Marshal(b)
	b.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "", "llmsim could not encode its answer.")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(raw)
}

// advance moves a batch on by the clock: its counts while it runs, its
// answers once its time is up (or at once when it was cancelled).
func (s *Server) advance(b *simBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lines == nil {
		return // ended (or failed at validation)
	}
	now := s.cfg.Now()
	el := now.Sub(b.created)
	if b.Status == "in_progress" && el < s.cfg.BatchTime {
		b.RequestCounts.Completed = b.RequestCounts.Total * int64(el) / int64(s.cfg.BatchTime)
		return
	}
	done := len(b.lines)
	if b.Status == "cancelling" && el < s.cfg.BatchTime {
		done = int(int64(len(b.lines)) * int64(el) / int64(max(s.cfg.BatchTime, 1)))
	}
	s.finish(b, done, now)
}

type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *batchError `json:"error"`
}

type ctxKey struct{}

// batchCall reports whether r is a line of a batch being answered: no
// rate limits, faults or latency.
func batchCall(r *http.Request) bool { return r.Context().Value(ctxKey{}) != nil }

// finish answers the first done lines and ends the rest cancelled (when
// the batch was cancelled), then stores the output and error files.
func (s *Server) finish(b *simBatch, done int, now time.Time) {
	var out, errf bytes.Buffer
	expired := false
	var answered int64
	b.RequestCounts.Completed, b.RequestCounts.Failed = 0, 0
	ctx := context.WithValue(context.Background(), ctxKey{}, true)
	for i, raw := range b.lines {
		var l struct {
			CustomID string          `json:"custom_id"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		_ = json.Unmarshal(raw, &l) // validated at creation
		ol := outLine{ID: "batch_req_" + strconv.Itoa(i), CustomID: l.CustomID}
		u := s.draw()
		switch {
		case i >= done:
			ol.Error = &batchError{Code: "batch_cancelled", Message: "This request was not executed because the batch was cancelled."}
		case u < s.cfg.BatchExpireRate:
			expired = true
			ol.Error = &batchError{Code: "batch_expired", Message: "This request could not be executed before the completion window expired."}
		case u < s.cfg.BatchExpireRate+s.cfg.BatchFailRate:
			ol.Response = &struct {
				StatusCode int             `json:"status_code"`
				RequestID  string          `json:"request_id"`
				Body       json.RawMessage `json:"body"`
			}{500, "req_sim" + strconv.Itoa(i), json.RawMessage(`{"error":{"message":"The server had an error processing your request.","type":"server_error"}}`)}
		default:
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, l.URL, bytes.NewReader(l.Body))
			req.Header.Set("Content-Type", "application/json")
			if s.cfg.APIKey != "" {
				req.Header.Set("Authorization", "Bearer "+s.cfg.APIKey)
			}
			rec := httptest.NewRecorder()
			s.mux.ServeHTTP(rec, req)
			answered++
			ol.Response = &struct {
				StatusCode int             `json:"status_code"`
				RequestID  string          `json:"request_id"`
				Body       json.RawMessage `json:"body"`
			}{rec.Code, "req_sim" + strconv.Itoa(i), json.RawMessage(bytes.TrimSpace(rec.Body.Bytes()))}
		}
		line, _ := json.Marshal(&ol)
		line = append(line, '\n')
		if ol.Error != nil || ol.Response.StatusCode != http.StatusOK {
			errf.Write(line)
			b.RequestCounts.Failed++
		} else {
			out.Write(line)
			b.RequestCounts.Completed++
		}
	}
	t := now.Unix()
	switch {
	case b.Status == "cancelling":
		b.Status, b.CancelledAt = "cancelled", &t
	case expired:
		b.Status = "expired"
	default:
		b.Status, b.CompletedAt = "completed", &t
	}
	s.bat.mu.Lock()
	for _, data := range []*bytes.Buffer{&out, &errf} {
		if data.Len() == 0 {
			continue
		}
		f := &simFile{ID: s.newID("file-sim"), Object: "file", Bytes: int64(data.Len()), CreatedAt: t, data: data.Bytes()}
		if data == &out {
			f.Filename, f.Purpose, b.OutputFileID = b.ID+"_output.jsonl", "batch_output", &f.ID
		} else {
			f.Filename, f.Purpose, b.ErrorFileID = b.ID+"_error.jsonl", "batch_output", &f.ID
		}
		s.bat.files[f.ID] = f
		s.bat.order = append(s.bat.order, f)
	}
	s.bat.linesDone += int64(len(b.lines))
	s.bat.answered += answered
	s.bat.mu.Unlock()
	b.lines = nil
}
