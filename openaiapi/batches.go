package openaiapi

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
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// The OpenAI Batch API, over durable jobs (NewBatches).
//
// A batch is a job, and its id is the job's id. Creating one streams the
// input file's lines (never loaded whole) into BatchJobs.Begin's creator;
// the endpoint and input file are kept in the job's metadata under
// reserved keys, which the batch object leaves out. Once the job has
// ended, its results and errors files (already in OpenAI's batch output
// format) are registered in the file store by FileStore.Adopt under ids
// derived from the job id (sha256), so that GET /v1/files/{id}/content
// serves them; registering is idempotent and happens on the first read of
// the ended batch.
const (
	metaEndpoint  = "batcher.openai.endpoint"
	metaInputFile = "batcher.openai.input_file_id"
	batchMaxBody  = 64 << 10
	batchMaxDepth = 8
)

// BatchMaxMetadata is OpenAI's bound on a batch's metadata: 16 pairs (its
// key and value bounds are the core's, batcher.CheckMetadata's), as on a
// request's (MaxMetadata).
const BatchMaxMetadata = MaxMetadata

// BatchJobs is what the Batch API needs of a store of durable jobs, each
// call in the scope of ctx's caller (its tenant). batcherd adapts
// jobs.Manager to it; openaiapi cannot import jobs, which builds on this
// package's chat bodies.
//
// Errors that the caller should see as more than a server error wrap one
// of the ErrBatch... kinds, as a *BatchError.
type BatchJobs interface {
	// Begin starts a job that keeps the caller's meta (checked by the
	// jobs' rule, with at most BatchMaxMetadata entries, an error naming
	// "metadata") and the Batch API's own tags (keys beginning with
	// batcher.openai.), and must end within window.
	Begin(ctx context.Context, meta, tags map[string]string, window time.Duration) (BatchCreator, error)
	// Get returns a job, or an ErrBatchNotFound.
	Get(ctx context.Context, id string) (*BatchJob, error)
	// Cancel cancels a job and returns it, or an ErrBatchNotFound, or an
	// ErrBatchEnded when the job had already ended, decided with the
	// cancel itself (not by a read before it).
	Cancel(ctx context.Context, id string) (*BatchJob, error)
	// List returns at most limit of the jobs Begin made (the batches, no
	// job made another way), newest first, after the batch with id after
	// ("": from the newest), filtered and bounded by the store's query, so
	// that a page costs a page however many jobs the caller has; an after
	// that names no batch is an ErrBatchInvalid.
	List(ctx context.Context, after string, limit int) ([]*BatchJob, error)
}

// BatchCreator takes a job's lines before the job is stored.
type BatchCreator interface {
	// AddLine adds one line of the input file.
	AddLine(ctx context.Context, line []byte) error
	// AddInvalid adds a line refused before it was read, as an error line
	// of the job naming msg.
	AddInvalid(ctx context.Context, customID, msg string) error
	// Finish stores the job and returns it.
	Finish(ctx context.Context) (*BatchJob, error)
	// Abort drops the job.
	Abort()
}

// The OpenAI batch statuses a BatchJob reports.
const (
	BatchValidating = "validating"
	BatchInProgress = "in_progress"
	BatchFinalizing = "finalizing"
	BatchCompleted  = "completed"
	BatchFailed     = "failed"
	BatchCancelling = "cancelling"
	BatchCancelled  = "cancelled"
	BatchExpired    = "expired"
)

// BatchJob is a job as the Batch API shows it.
type BatchJob struct {
	ID     string
	Tenant string // who owns its output files
	// Metadata is the job's metadata, the reserved batcher. keys
	// included.
	Metadata map[string]string
	// Status is one of the Batch... statuses; "" is BatchInProgress.
	Status string
	// Error says why a failed job failed.
	Error string
	// Total, Completed and Failed count its lines (Failed includes the
	// expired and cancelled ones).
	Total, Completed, Failed int64
	// The job's times; zero: not (yet).
	CreatedAt, StartedAt, FinalizingAt, CancellingAt, Deadline, EndedAt time.Time
	// ResultsPath and ErrorsPath are an ended job's output files on disk;
	// a missing or empty one is no file. Their base names are part of the
	// file ids they are served under.
	ResultsPath, ErrorsPath string
}

// terminal says whether the job has ended.
func (j *BatchJob) terminal() bool {
	switch j.Status {
	case BatchCompleted, BatchFailed, BatchCancelled, BatchExpired:
		return true
	}
	return false
}

// The kinds of BatchJobs refusals, matched with errors.Is.
var (
	ErrBatchNotFound = errors.New("openaiapi: batch not found")
	// ErrBatchInvalid: the input is bad (a line, an empty file, too many
	// lines for the server): 400 naming the field.
	ErrBatchInvalid = errors.New("openaiapi: batch invalid")
	// ErrBatchForbidden: the caller may not use a route or priority the
	// batch names: 403.
	ErrBatchForbidden = errors.New("openaiapi: batch forbidden")
	// ErrBatchQuota: the caller is at its quota of jobs not ended: 429
	// with the error's RetryAfter.
	ErrBatchQuota = errors.New("openaiapi: batch quota")
	// ErrBatchItemsQuota: the batch has more lines than the caller's
	// quota per job: 400 (invalid_request_error, code
	// items_per_job_quota), not 429, since a retry is refused again.
	ErrBatchItemsQuota = errors.New("openaiapi: batch items quota")
	// ErrBatchClosed: the store is closing: 503.
	ErrBatchClosed = errors.New("openaiapi: batches closed")
	// ErrBatchEnded: a cancel found the batch ended: 400 naming its
	// status.
	ErrBatchEnded = errors.New("openaiapi: batch ended")
)

// BatchError is a BatchJobs refusal of one of the ErrBatch... kinds.
type BatchError struct {
	Kind    error  // one of the ErrBatch... errors
	Message string // what the caller reads
	// RetryAfter, for ErrBatchQuota, says when to try again.
	RetryAfter time.Duration
	Err        error // the store's own error; nil: none
}

func (e *BatchError) Error() string { return e.Message }

// Is reports whether target is e's kind.
func (e *BatchError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the store's own error.
func (e *BatchError) Unwrap() error { return e.Err }

// batchEndpoints are the endpoints a batch may target.
var batchEndpoints = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true, "/v1/embeddings": true}

// BatchEndpoints lists the endpoints a batch may target, sorted.
func BatchEndpoints() []string {
	out := make([]string, 0, len(batchEndpoints))
	for ep := range batchEndpoints {
		out = append(out, ep)
	}
	slices.Sort(out)
	return out
}

// batchWindows are the completion windows OpenAI accepts.
var batchWindows = map[string]time.Duration{"24h": 24 * time.Hour}

// NewBatches returns the Batch API (/v1/batches and below) over jobs, with
// input and output files in files; mount it with WithBatches.
func NewBatches(jobs BatchJobs, files *FileStore) http.Handler {
	return &batchAPI{jobs: jobs, files: files}
}

type batchAPI struct {
	jobs  BatchJobs
	files *FileStore
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
	id, cancel, ok := splitBatchPath(r.URL.Path)
	switch {
	case !ok:
		WriteError(w, notFound("", "unknown_url", "Invalid URL (%s %s)", r.Method, truncate(r.URL.Path)))
	case id == "":
		methods(w, r, endpoint{http.MethodGet, a.list, batchListParams}, endpoint{http.MethodPost, a.create, nil})
	case !cancel:
		methods(w, r, endpoint{http.MethodGet, func(w http.ResponseWriter, r *http.Request) { a.get(w, r, id) }, nil})
	default:
		methods(w, r, endpoint{http.MethodPost, func(w http.ResponseWriter, r *http.Request) { a.cancel(w, r, id) }, nil})
	}
}

// splitBatchPath reads a path at or under /v1/batches as the Batch API
// serves it, slashes at either end of the rest ignored: the collection
// (id ""), a batch (id), or its cancel (id, cancel); ok is false for any
// other. ServeHTTP routes by it and pathTemplate names metrics and spans
// by it, so that a request is counted under the route that served it.
func splitBatchPath(p string) (id string, cancel, ok bool) {
	rest := strings.Trim(strings.TrimPrefix(p, "/v1/batches"), "/")
	id, op, nested := strings.Cut(rest, "/")
	switch {
	case !nested:
		return id, false, true
	case op == "cancel":
		return id, true, true
	}
	return "", false, false
}

// batchListParams are the query parameters of GET /v1/batches.
var batchListParams = []string{"limit", "after"}

// batchRequest is POST /v1/batches's body.
type batchRequest struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

var knownBatchFields = sync.OnceValue(func() map[string]bool { return jsonFields(reflect.TypeFor[batchRequest]()) })

// check returns the request's completion window, or the error naming the
// field at fault.
func (req *batchRequest) check() (time.Duration, *Error) {
	if !batchEndpoints[req.Endpoint] {
		return 0, badRequest("endpoint", "endpoint %q is not supported: use /v1/chat/completions, /v1/completions or /v1/embeddings", req.Endpoint)
	}
	window, ok := batchWindows[req.CompletionWindow]
	if !ok {
		return 0, badRequest("completion_window", "completion_window %q is not supported: use 24h", req.CompletionWindow)
	}
	if ve := batcher.CheckMetadata("metadata", req.Metadata, BatchMaxMetadata); ve != nil {
		return 0, badRequest("metadata", "%s", ve.Error())
	}
	if req.InputFileID == "" {
		return 0, badRequest("input_file_id", "input_file_id must be set")
	}
	return window, nil
}

func (a *batchAPI) create(w http.ResponseWriter, r *http.Request) {
	var req batchRequest
	if e := decodeKnown(w, r, &req, knownBatchFields(), batchMaxBody, batchMaxDepth, "/v1/batches"); e != nil {
		WriteError(w, e)
		return
	}
	window, e := req.check()
	if e != nil {
		WriteError(w, e)
		return
	}
	f, err := a.openInput(r.Context(), req.InputFileID)
	if err != nil {
		WriteError(w, err)
		return
	}
	defer func() { _ = f.Close() }()
	tags := map[string]string{metaEndpoint: req.Endpoint, metaInputFile: req.InputFileID}
	ctx := r.Context()
	c, err := a.jobs.Begin(ctx, req.Metadata, tags, window)
	if err != nil {
		WriteError(w, jobError(err, "metadata"))
		return
	}
	if e := feed(ctx, c, f, req.Endpoint); e != nil {
		c.Abort()
		WriteError(w, e)
		return
	}
	j, err := c.Finish(ctx)
	if err != nil {
		WriteError(w, jobError(err, "input_file_id"))
		return
	}
	writeBatchJSON(w, a.object(j))
}

// openInput opens the caller's input file, which must be a batch file.
func (a *batchAPI) openInput(ctx context.Context, id string) (*os.File, error) {
	info, f, err := a.files.Open(id)
	if err == nil && !info.VisibleTo(TenantOf(ctx)) {
		_ = f.Close()
		err = ErrFileNotFound
	}
	if errors.Is(err, ErrFileNotFound) {
		return nil, &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "input_file_id",
			Message: fmt.Sprintf("no file with id %q", id)}
	}
	if err != nil {
		return nil, err
	}
	if info.Purpose != "batch" {
		_ = f.Close()
		return nil, badRequest("input_file_id", "file %s has purpose %q, not batch", info.ID, info.Purpose)
	}
	return f, nil
}

// feed streams the input file's lines into c; a line whose url is not
// endpoint becomes an error line.
func feed(ctx context.Context, c BatchCreator, f io.Reader, endpoint string) *Error {
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
			// The file system's text names a path on the server: not the
			// caller's business.
			return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: "reading the input file failed"}
		}
	}
}

// jobError maps a BatchJobs error: the tenant's jobs quota, which frees
// as jobs end, is a 429 naming it with Retry-After; its items_per_job
// quota, which the same file would exceed again, a 400 naming it; bad
// input a 400 naming param, a closing store a 503, each with the
// BatchError's message; anything else is a 500 that shows nothing of the
// store's own text.
func jobError(err error, param string) *Error {
	msg := err.Error()
	var be *BatchError
	if errors.As(err, &be) {
		msg = be.Message
	}
	switch {
	case errors.Is(err, ErrBatchForbidden):
		// The message names the line, its custom_id and the route or
		// priority the tenant may not use.
		return &Error{Status: http.StatusForbidden, Type: TypePermission, Code: "forbidden", Param: param, Message: msg}
	case errors.Is(err, ErrBatchItemsQuota):
		// Permanent for this file: the same file is refused again, so not
		// a 429, which the OpenAI SDKs retry on their own; a 400, as
		// the server's own jobs.max_items is (ErrBatchInvalid).
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "items_per_job_quota", Param: param, Message: msg}
	case errors.Is(err, ErrBatchQuota):
		return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "jobs_quota", Message: msg, RetryAfter: be.RetryAfter}
	case errors.Is(err, ErrBatchInvalid):
		return badRequest(param, "%s", msg)
	case errors.Is(err, ErrBatchClosed):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: "shutting_down", Message: msg}
	default:
		return ErrorFrom(err, "")
	}
}

func (a *batchAPI) notFound(w http.ResponseWriter, id string) {
	WriteError(w, &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "batch_id",
		Message: fmt.Sprintf("no batch with id %q", id)})
}

// isBatch says whether j was created through the Batch API, which alone
// keeps the endpoint in its metadata. A job created over gRPC or by
// batcherctl is no batch: it has no endpoint or input file to show, and
// the Batch API neither lists nor reads nor cancels it.
func (j *BatchJob) isBatch() bool { return j.Metadata[metaEndpoint] != "" }

// getBatch is the batch id, or an ErrBatchNotFound when the job is no
// batch.
func (a *batchAPI) getBatch(ctx context.Context, id string) (*BatchJob, error) {
	j, err := a.jobs.Get(ctx, id)
	if err == nil && !j.isBatch() {
		return nil, ErrBatchNotFound
	}
	return j, err
}

func (a *batchAPI) get(w http.ResponseWriter, r *http.Request, id string) {
	a.answer(w, id)(a.getBatch(r.Context(), id))
}

// cancel cancels a batch that has not ended. As OpenAI does, an ended
// one is a 400 naming its status, not the batch as it was: the caller
// asked for an end it cannot have. Whether the batch had ended is the
// cancel's own answer (ErrBatchEnded), so a batch that ends while the
// handler runs is never answered as a cancel that took; the read before
// it only keeps a job that is no batch out of reach.
func (a *batchAPI) cancel(w http.ResponseWriter, r *http.Request, id string) {
	if _, err := a.getBatch(r.Context(), id); err != nil {
		a.answer(w, id)(nil, err)
		return
	}
	j, err := a.jobs.Cancel(r.Context(), id)
	if errors.Is(err, ErrBatchEnded) {
		// An ended batch stays as it ended, so this read is its status.
		if j, err = a.getBatch(r.Context(), id); err == nil {
			WriteError(w, badRequest("", "Cannot cancel a batch with status '%s'", j.Status))
			return
		}
	}
	a.answer(w, id)(j, err)
}

// answer writes the batch a call on id returned, or its error.
func (a *batchAPI) answer(w http.ResponseWriter, id string) func(*BatchJob, error) {
	return func(j *BatchJob, err error) {
		if errors.Is(err, ErrBatchNotFound) {
			a.notFound(w, id)
			return
		}
		if err != nil {
			WriteError(w, jobError(err, "batch_id"))
			return
		}
		writeBatchJSON(w, a.object(j))
	}
}

func (a *batchAPI) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			WriteError(w, badRequest("limit", "limit %q: want a whole number from 1 to 100", s))
			return
		}
		limit = n
	}
	// The store filters and bounds the page (BatchJobs.List): one more
	// than the limit says whether there are more.
	js, err := a.jobs.List(r.Context(), q.Get("after"), limit+1)
	if errors.Is(err, ErrBatchInvalid) {
		WriteError(w, badRequest("after", "after %q names no batch", q.Get("after")))
		return
	}
	if err != nil {
		WriteError(w, jobError(err, ""))
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
	writeBatchJSON(w, &out)
}

// outputID is the file id of a job's output file name: deterministic, so
// that registering it twice is harmless.
func outputID(jobID, name string) string {
	sum := sha256.Sum256([]byte(jobID + "/" + name))
	return "file-" + hex.EncodeToString(sum[:12])
}

// outputFile registers the ended job's file at path in the store and
// returns its id, or nil when the file is missing or empty.
func (a *batchAPI) outputFile(j *BatchJob, path string) *string {
	if path == "" {
		return nil
	}
	name := filepath.Base(path)
	id := outputID(j.ID, name)
	if _, err := a.files.Stat(id); err == nil {
		return &id
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		return nil
	}
	if _, err := a.files.Adopt(j.Tenant, id, "batch_output", j.ID+"_"+name, path); err != nil {
		return nil
	}
	return &id
}

func unixOrNil(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	s := t.Unix()
	return &s
}

func (a *batchAPI) object(j *BatchJob) *batchObject {
	b := &batchObject{ID: j.ID, Object: "batch", Endpoint: j.Metadata[metaEndpoint], InputFileID: j.Metadata[metaInputFile],
		CompletionWindow: "24h", Status: j.Status, CreatedAt: j.CreatedAt.Unix(), Metadata: map[string]string{},
		RequestCounts: batchCounts{Total: j.Total, Completed: j.Completed, Failed: j.Failed}}
	if b.Status == "" {
		b.Status = BatchInProgress
	}
	for k, v := range j.Metadata {
		if !strings.HasPrefix(k, "batcher.") {
			b.Metadata[k] = v
		}
	}
	b.InProgressAt = unixOrNil(j.StartedAt)
	b.CancellingAt, b.FinalizingAt = unixOrNil(j.CancellingAt), unixOrNil(j.FinalizingAt)
	b.ExpiresAt = unixOrNil(j.Deadline)
	if !j.terminal() {
		return b
	}
	b.OutputFileID = a.outputFile(j, j.ResultsPath)
	b.ErrorFileID = a.outputFile(j, j.ErrorsPath)
	end := unixOrNil(j.EndedAt)
	switch j.Status {
	case BatchCompleted:
		b.CompletedAt = end
	case BatchFailed:
		b.FailedAt = end
		if j.Error != "" {
			b.Errors = map[string]any{"object": "list", "data": []batchError{{Code: "failed", Message: j.Error}}}
		}
	case BatchCancelled:
		b.CancelledAt = end
	case BatchExpired:
		b.ExpiredAt = end
	}
	return b
}

func writeBatchJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
