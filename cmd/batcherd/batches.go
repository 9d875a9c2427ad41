package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/openaiapi"
	"github.com/batcherhq/batcher/server"
)

// The OpenAI Batch API, mapped onto the durable jobs.
//
// A batch is a job, and its id is the job's id. Creating one streams the
// input file's lines (never loaded whole) into jobs.Manager.Begin; the
// endpoint and input file are kept in the job's metadata under reserved
// keys, which the batch object leaves out. Once the job has ended, its
// results.jsonl and errors.jsonl (already in OpenAI's batch output format)
// are registered in the file store by openaiapi.FileStore.Adopt under ids
// derived from the job id (sha256), so that GET /v1/files/{id}/content
// serves them; registering is idempotent and happens on the first read of
// the ended batch.
const (
	metaEndpoint  = "batcher.openai.endpoint"
	metaInputFile = "batcher.openai.input_file_id"
	batchMaxBody  = 64 << 10
	batchMaxDepth = 8
)

// batchEndpoints are the endpoints a batch may target.
var batchEndpoints = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true, "/v1/embeddings": true}

// batchWindows are the completion windows OpenAI accepts.
var batchWindows = map[string]time.Duration{"24h": 24 * time.Hour}

// batchesMount returns startHTTP's mount: the batch API over m, or nothing
// when jobs or the file store are off.
func batchesMount(m *jobs.Manager) func(*openaiapi.FileStore) []openaiapi.Option {
	return func(fs *openaiapi.FileStore) []openaiapi.Option {
		if m == nil || fs == nil {
			return nil
		}
		return []openaiapi.Option{openaiapi.WithBatches(&batchAPI{m: m, files: fs})}
	}
}

type batchAPI struct {
	m     *jobs.Manager
	files *openaiapi.FileStore
}

type batchCounts struct {
	Total     int64 `json:"total"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
}

type batchError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   any    `json:"param"`
	Line    any    `json:"line"`
}

type batchObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           any               `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    batchCounts       `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
}

type batchList struct {
	Object  string         `json:"object"`
	Data    []*batchObject `json:"data"`
	FirstID *string        `json:"first_id"`
	LastID  *string        `json:"last_id"`
	HasMore bool           `json:"has_more"`
}

func (a *batchAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, "/v1/batches"), "/")
	parts := strings.Split(rest, "/")
	switch {
	case rest == "" && r.Method == http.MethodPost:
		a.create(w, r)
	case rest == "" && r.Method == http.MethodGet:
		a.list(w, r)
	case len(parts) == 1 && r.Method == http.MethodGet:
		a.get(w, r, parts[0])
	case len(parts) == 2 && parts[1] == "cancel" && r.Method == http.MethodPost:
		a.cancel(w, r, parts[0])
	default:
		openaiapi.WriteError(w, &openaiapi.Error{Status: http.StatusNotFound, Type: openaiapi.TypeInvalidRequest,
			Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	}
}

func badParam(param, format string, args ...any) *openaiapi.Error {
	return &openaiapi.Error{Status: http.StatusBadRequest, Type: openaiapi.TypeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

func (a *batchAPI) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		InputFileID      string            `json:"input_file_id"`
		Endpoint         string            `json:"endpoint"`
		CompletionWindow string            `json:"completion_window"`
		Metadata         map[string]string `json:"metadata"`
	}
	if e := openaiapi.DecodeJSON(w, r, &req, batchMaxBody, batchMaxDepth); e != nil {
		openaiapi.WriteError(w, e)
		return
	}
	if !batchEndpoints[req.Endpoint] {
		openaiapi.WriteError(w, badParam("endpoint", "endpoint %q is not supported: use /v1/chat/completions, /v1/completions or /v1/embeddings", req.Endpoint))
		return
	}
	window, ok := batchWindows[req.CompletionWindow]
	if !ok {
		openaiapi.WriteError(w, badParam("completion_window", "completion_window %q is not supported: use 24h", req.CompletionWindow))
		return
	}
	if len(req.Metadata) > 16 {
		openaiapi.WriteError(w, badParam("metadata", "metadata holds %d keys, at most 16", len(req.Metadata)))
		return
	}
	for k := range req.Metadata {
		if strings.HasPrefix(k, "batcher.") {
			openaiapi.WriteError(w, badParam("metadata", "metadata key %q: the prefix batcher. is reserved", k))
			return
		}
	}
	if req.InputFileID == "" {
		openaiapi.WriteError(w, badParam("input_file_id", "input_file_id must be set"))
		return
	}
	info, f, err := a.files.Open(req.InputFileID)
	if err == nil && !info.VisibleTo(openaiapi.TenantOf(r.Context())) {
		_ = f.Close()
		err = openaiapi.ErrFileNotFound
	}
	if errors.Is(err, openaiapi.ErrFileNotFound) {
		openaiapi.WriteError(w, &openaiapi.Error{Status: http.StatusNotFound, Type: openaiapi.TypeInvalidRequest, Param: "input_file_id",
			Message: fmt.Sprintf("no file with id %q", req.InputFileID)})
		return
	}
	if err != nil {
		openaiapi.WriteError(w, err)
		return
	}
	defer func() { _ = f.Close() }()
	if info.Purpose != "batch" {
		openaiapi.WriteError(w, badParam("input_file_id", "file %s has purpose %q, not batch", info.ID, info.Purpose))
		return
	}
	meta := map[string]string{metaEndpoint: req.Endpoint, metaInputFile: req.InputFileID}
	for k, v := range req.Metadata {
		meta[k] = v
	}
	ctx := jobsScope(r.Context())
	c, err := a.m.Begin(ctx, jobs.Spec{Metadata: meta, CompletionWindow: window})
	if err != nil {
		openaiapi.WriteError(w, jobError(err, ""))
		return
	}
	if e := feed(ctx, c, f, req.Endpoint); e != nil {
		c.Abort()
		openaiapi.WriteError(w, e)
		return
	}
	j, err := c.Finish(ctx)
	if err != nil {
		openaiapi.WriteError(w, jobError(err, "input_file_id"))
		return
	}
	writeJSON(w, a.object(j))
}

// feed streams the input file's lines into c; a line whose url is not
// endpoint becomes an error line.
func feed(ctx context.Context, c *jobs.Creator, f io.Reader, endpoint string) *openaiapi.Error {
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			var l struct {
				CustomID string `json:"custom_id"`
				URL      string `json:"url"`
			}
			_ = json.Unmarshal(t, &l) // a malformed line is reported by AddLine
			var aerr error
			if l.URL != "" && l.URL != endpoint {
				aerr = c.AddInvalid(ctx, l.CustomID, fmt.Sprintf("url %q does not match the batch's endpoint %s", l.URL, endpoint))
			} else {
				aerr = c.AddLine(ctx, t)
			}
			if aerr != nil {
				return jobError(aerr, "input_file_id")
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &openaiapi.Error{Status: http.StatusInternalServerError, Type: "server_error", Message: "reading the input file: " + err.Error()}
		}
	}
}

// jobError maps a job manager's error: a tenant's quota is a 429 naming
// it (with Retry-After for the jobs quota, which frees as jobs end), bad
// input a 400 naming param, a closing manager a 503, anything else a 500.
func jobError(err error, param string) *openaiapi.Error {
	switch {
	case errors.Is(err, batcher.ErrForbidden):
		// The message names the line, its custom_id and the route or
		// priority the tenant may not use (jobs' Creator).
		return &openaiapi.Error{Status: http.StatusForbidden, Type: openaiapi.TypePermission, Code: "forbidden", Param: param,
			Message: strings.TrimPrefix(err.Error(), "jobs: ")}
	case errors.Is(err, jobs.ErrQuota) && errors.Is(err, jobs.ErrTooManyItems):
		return &openaiapi.Error{Status: http.StatusTooManyRequests, Type: openaiapi.TypeRateLimit, Code: "items_per_job_quota",
			Param: param, Message: strings.TrimPrefix(err.Error(), "jobs: ")}
	case errors.Is(err, jobs.ErrQuota):
		return &openaiapi.Error{Status: http.StatusTooManyRequests, Type: openaiapi.TypeRateLimit, Code: "jobs_quota",
			Message: strings.TrimPrefix(err.Error(), "jobs: "), RetryAfter: server.JobsQuotaRetryDelay}
	case errors.Is(err, jobs.ErrInvalid), errors.Is(err, jobs.ErrEmpty), errors.Is(err, jobs.ErrTooManyItems):
		return badParam(param, "%v", err)
	case errors.Is(err, jobs.ErrClosed):
		return &openaiapi.Error{Status: http.StatusServiceUnavailable, Type: openaiapi.TypeUnavailable, Code: "shutting_down", Message: err.Error()}
	default:
		return &openaiapi.Error{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()}
	}
}

func (a *batchAPI) notFound(w http.ResponseWriter, id string) {
	openaiapi.WriteError(w, &openaiapi.Error{Status: http.StatusNotFound, Type: openaiapi.TypeInvalidRequest, Param: "batch_id",
		Message: fmt.Sprintf("no batch with id %q", id)})
}

func (a *batchAPI) get(w http.ResponseWriter, r *http.Request, id string) {
	j, err := a.m.Get(jobsScope(r.Context()), id)
	if errors.Is(err, jobs.ErrNotFound) {
		a.notFound(w, id)
		return
	}
	if err != nil {
		openaiapi.WriteError(w, err)
		return
	}
	writeJSON(w, a.object(j))
}

func (a *batchAPI) cancel(w http.ResponseWriter, r *http.Request, id string) {
	j, err := a.m.Cancel(jobsScope(r.Context()), id)
	if errors.Is(err, jobs.ErrNotFound) {
		a.notFound(w, id)
		return
	}
	if err != nil {
		openaiapi.WriteError(w, err)
		return
	}
	writeJSON(w, a.object(j))
}

func (a *batchAPI) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			openaiapi.WriteError(w, badParam("limit", "limit %q: want a whole number from 1 to 100", s))
			return
		}
		limit = n
	}
	js, err := a.m.List(jobsScope(r.Context()), jobs.StateUnspecified, q.Get("after"), limit+1)
	if errors.Is(err, jobs.ErrInvalid) {
		openaiapi.WriteError(w, badParam("after", "after %q names no batch", q.Get("after")))
		return
	}
	if err != nil {
		openaiapi.WriteError(w, err)
		return
	}
	out := batchList{Object: "list", Data: []*batchObject{}}
	if len(js) > limit {
		js, out.HasMore = js[:limit], true
	}
	for _, j := range js {
		out.Data = append(out.Data, a.object(j))
	}
	if len(js) > 0 {
		first, last := js[0].ID, js[len(js)-1].ID
		out.FirstID, out.LastID = &first, &last
	}
	writeJSON(w, &out)
}

// outputID is the file id of a job's output file name: deterministic, so
// that registering it twice is harmless.
func outputID(jobID, name string) string {
	sum := sha256.Sum256([]byte(jobID + "/" + name))
	return "file-" + hex.EncodeToString(sum[:12])
}

// outputFile registers the ended job's file name in the store and returns
// its id, or nil when the file is missing or empty.
func (a *batchAPI) outputFile(j *jobs.Job, name string) *string {
	id := outputID(j.ID, name)
	if _, err := a.files.Stat(id); err == nil {
		return &id
	}
	path := filepath.Join(a.m.Dir(j), name)
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		return nil
	}
	if _, err := a.files.Adopt(j.Tenant, id, "batch_output", j.ID+"_"+name, path); err != nil {
		return nil
	}
	return &id
}

func unix(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	s := t.Unix()
	return &s
}

var batchStatus = map[jobs.State]string{
	jobs.StateValidating: "validating", jobs.StateQueued: "in_progress", jobs.StateRunning: "in_progress",
	jobs.StateFinalizing: "finalizing", jobs.StateCompleted: "completed", jobs.StateFailed: "failed",
	jobs.StateCancelling: "cancelling", jobs.StateCancelled: "cancelled", jobs.StateExpired: "expired",
}

func (a *batchAPI) object(j *jobs.Job) *batchObject {
	b := &batchObject{ID: j.ID, Object: "batch", Endpoint: j.Spec.Metadata[metaEndpoint], InputFileID: j.Spec.Metadata[metaInputFile],
		CompletionWindow: "24h", Status: batchStatus[j.State], CreatedAt: j.CreatedAt.Unix(), Metadata: map[string]string{},
		RequestCounts: batchCounts{Total: j.Counts.Total, Completed: j.Counts.Succeeded, Failed: j.Counts.Failed + j.Counts.Expired + j.Counts.Cancelled}}
	if b.Status == "" {
		b.Status = "in_progress"
	}
	for k, v := range j.Spec.Metadata {
		if !strings.HasPrefix(k, "batcher.") {
			b.Metadata[k] = v
		}
	}
	b.InProgressAt = unix(j.StartedAt)
	b.CancellingAt, b.FinalizingAt = unix(j.CancellingAt), unix(j.FinalizingAt)
	if dl := j.Deadline(); !dl.IsZero() {
		b.ExpiresAt = unix(dl)
	}
	if j.State.Terminal() {
		b.OutputFileID = a.outputFile(j, jobs.ResultsFile)
		b.ErrorFileID = a.outputFile(j, jobs.ErrorsFile)
		end := unix(j.EndedAt)
		switch j.State {
		case jobs.StateCompleted:
			b.CompletedAt = end
		case jobs.StateFailed:
			b.FailedAt = end
			if j.Error != "" {
				b.Errors = map[string]any{"object": "list", "data": []batchError{{Code: "failed", Message: j.Error}}}
			}
		case jobs.StateCancelled:
			b.CancelledAt = end
		case jobs.StateExpired:
			b.ExpiredAt = end
		}
	}
	return b
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
