package llmsim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
