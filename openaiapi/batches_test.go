package openaiapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/openaiapi"
)

// fakeJobs is a BatchJobs in memory, with a hook per call to inject
// errors.
type fakeJobs struct {
	mu   sync.Mutex
	jobs []*openaiapi.BatchJob // oldest first
	seq  int

	beginErr, lineErr, finishErr error // returned by Begin, AddLine, Finish
	listErr, getErr              error
	lines                        []string // every AddLine, in order
	invalid                      []string // every AddInvalid, "custom_id: msg"
	windows                      []time.Duration
	aborted                      int
	listLimits                   []int // every List's limit, in order
}

func (f *fakeJobs) Begin(_ context.Context, md, tags map[string]string, window time.Duration) (openaiapi.BatchCreator, error) {
	if f.beginErr != nil {
		return nil, f.beginErr
	}
	meta := maps.Clone(tags)
	maps.Copy(meta, md)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.windows = append(f.windows, window)
	return &fakeCreator{f: f, meta: meta}, nil
}

func (f *fakeJobs) Get(_ context.Context, id string) (*openaiapi.BatchJob, error) {
	if f.getErr != nil {
		return nil, f.getErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range f.jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return nil, &openaiapi.BatchError{Kind: openaiapi.ErrBatchNotFound, Message: "job not found"}
}

func (f *fakeJobs) Cancel(ctx context.Context, id string) (*openaiapi.BatchJob, error) {
	j, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// As the store does, in one step with the cancel: an ended job is
	// left as it is.
	switch j.Status {
	case openaiapi.BatchCompleted, openaiapi.BatchFailed, openaiapi.BatchExpired, openaiapi.BatchCancelled:
		return nil, &openaiapi.BatchError{Kind: openaiapi.ErrBatchEnded, Message: "ended"}
	}
	j.Status, j.CancellingAt = openaiapi.BatchCancelling, time.Unix(1_700_000_100, 0)
	return j, nil
}

func (f *fakeJobs) List(_ context.Context, after string, limit int) ([]*openaiapi.BatchJob, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listLimits = append(f.listLimits, limit)
	// As the store does, by the jobs' kind: batches alone.
	isBatch := func(j *openaiapi.BatchJob) bool { return j.Metadata["batcher.openai.endpoint"] != "" }
	var out []*openaiapi.BatchJob
	found := after == ""
	for i := len(f.jobs) - 1; i >= 0 && len(out) < limit; i-- {
		switch {
		case !isBatch(f.jobs[i]):
		case found:
			out = append(out, f.jobs[i])
		case f.jobs[i].ID == after:
			found = true
		}
	}
	if !found {
		return nil, &openaiapi.BatchError{Kind: openaiapi.ErrBatchInvalid, Message: "invalid: after"}
	}
	return out, nil
}

// add stores j as the newest job; a nil Metadata makes it a batch, as
// the Batch API creates them (an empty one: a job created elsewhere).
func (f *fakeJobs) add(j *openaiapi.BatchJob) {
	if j.Metadata == nil {
		j.Metadata = map[string]string{"batcher.openai.endpoint": "/v1/chat/completions", "batcher.openai.input_file_id": "file-x"}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, j)
}

type fakeCreator struct {
	f    *fakeJobs
	meta map[string]string
	n    int
}

func (c *fakeCreator) AddLine(_ context.Context, line []byte) error {
	if c.f.lineErr != nil {
		return c.f.lineErr
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.n++
	c.f.lines = append(c.f.lines, string(line))
	return nil
}

func (c *fakeCreator) AddInvalid(_ context.Context, customID, msg string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.n++
	c.f.invalid = append(c.f.invalid, customID+": "+msg)
	return nil
}

func (c *fakeCreator) Finish(context.Context) (*openaiapi.BatchJob, error) {
	if c.f.finishErr != nil {
		return nil, c.f.finishErr
	}
	c.f.mu.Lock()
	c.f.seq++
	j := &openaiapi.BatchJob{ID: fmt.Sprintf("batch_%d", c.f.seq), Metadata: c.meta, Status: openaiapi.BatchValidating,
		Total: int64(c.n), CreatedAt: time.Unix(1_700_000_000, 0)}
	c.f.mu.Unlock()
	c.f.add(j)
	return j, nil
}

func (c *fakeCreator) Abort() {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.aborted++
}

// batchesEnv is the Batch API over a fakeJobs and a file store.
type batchesEnv struct {
	jobs  *fakeJobs
	files *openaiapi.FileStore
	h     http.Handler
}

func newBatchesEnv(t *testing.T) *batchesEnv {
	t.Helper()
	fs, err := openaiapi.OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fj := &fakeJobs{}
	return &batchesEnv{jobs: fj, files: fs, h: openaiapi.NewBatches(fj, fs)}
}

// upload stores content as a file of purpose and returns its id.
func (e *batchesEnv) upload(t *testing.T, purpose, content string) string {
	t.Helper()
	f, err := e.files.Create("", purpose, "in.jsonl", strings.NewReader(content), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return f.ID
}

// do calls the API and returns the status, the headers and the body.
func (e *batchesEnv) do(t *testing.T, method, path, body string) (int, http.Header, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec.Code, rec.Header(), rec.Body.String()
}

type batchAPIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// decodeError decodes an error body and checks it is OpenAI's shape:
// {"error":{"message","type","param","code"}}, those four keys and no
// others, a message and a type, and a message that names the cause
// without an internal package's prefix.
func decodeError(t *testing.T, body string) batchAPIError {
	t.Helper()
	checkErrorShape(t, body)
	var e batchAPIError
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return e
}

// internalPrefixes start the text of Go packages' errors (Batcher's and
// the standard library's); none may start a message a caller reads.
var internalPrefixes = regexp.MustCompile(`^(jobs|openaiapi|batcher|multipart|json|file store|http|open|read|write|NextPart): `)

func checkErrorShape(t *testing.T, body string) {
	t.Helper()
	var top map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &top); err != nil || len(top) != 1 || top["error"] == nil {
		t.Fatalf("error body %s: want {\"error\":{...}} (%v)", body, err)
	}
	fields := top["error"]
	var msg, typ string
	var param, code *string
	if len(fields) != 4 || json.Unmarshal(fields["message"], &msg) != nil || json.Unmarshal(fields["type"], &typ) != nil ||
		json.Unmarshal(fields["param"], &param) != nil || json.Unmarshal(fields["code"], &code) != nil {
		t.Fatalf("error body %s: want exactly message, type (strings), param and code (string or null)", body)
	}
	if msg == "" || typ == "" {
		t.Errorf("error body %s: empty message or type", body)
	}
	if internalPrefixes.MatchString(msg) || strings.Contains(msg, "jobs: ") {
		t.Errorf("error message %q carries an internal package's prefix", msg)
	}
}

func strOrNull(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

const chatLine = `{"custom_id":"%s","method":"POST","url":"%s","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`

func createBody(fileID string, extra string) string {
	return `{"input_file_id":"` + fileID + `","endpoint":"/v1/chat/completions","completion_window":"24h"` + extra + `}`
}

// TestBatchesCreate: a batch's lines reach the jobs in order, a line for
// another endpoint becomes an error line, the reserved metadata keys stay
// out of the batch object and the object has OpenAI's fields.
func TestBatchesCreate(t *testing.T) {
	e := newBatchesEnv(t)
	in := fmt.Sprintf(chatLine, "a", "/v1/chat/completions") + "\n\n" + fmt.Sprintf(chatLine, "b", "/v1/embeddings") + "\n" +
		fmt.Sprintf(chatLine, "c", "/v1/chat/completions") // no final newline
	id := e.upload(t, "batch", in)
	code, _, body := e.do(t, http.MethodPost, "/v1/batches", createBody(id, `,"metadata":{"team":"x"}`))
	if code != http.StatusOK {
		t.Fatalf("create: %d %s", code, body)
	}
	var b map[string]any
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": "batch_1", "object": "batch", "endpoint": "/v1/chat/completions", "input_file_id": id,
		"completion_window": "24h", "status": "validating", "created_at": float64(1_700_000_000), "output_file_id": nil,
		"error_file_id": nil, "errors": nil, "in_progress_at": nil, "expires_at": nil, "completed_at": nil}
	for k, v := range want {
		if got, ok := b[k]; !ok || got != v {
			t.Errorf("batch.%s = %v, want %v", k, got, v)
		}
	}
	if md, _ := json.Marshal(b["metadata"]); string(md) != `{"team":"x"}` {
		t.Errorf("metadata = %s, want the caller's keys only", md)
	}
	if rc, _ := json.Marshal(b["request_counts"]); string(rc) != `{"completed":0,"failed":0,"total":3}` {
		t.Errorf("request_counts = %s", rc)
	}
	if len(e.jobs.lines) != 2 || !strings.Contains(e.jobs.lines[0], `"a"`) || !strings.Contains(e.jobs.lines[1], `"c"`) {
		t.Errorf("lines = %q, want a's then c's", e.jobs.lines)
	}
	if len(e.jobs.invalid) != 1 || e.jobs.invalid[0] != `b: url "/v1/embeddings" does not match the batch's endpoint /v1/chat/completions` {
		t.Errorf("invalid lines = %q", e.jobs.invalid)
	}
	if len(e.jobs.windows) != 1 || e.jobs.windows[0] != 24*time.Hour {
		t.Errorf("windows = %v, want [24h]", e.jobs.windows)
	}
	j, _ := e.jobs.Get(t.Context(), "batch_1")
	if j.Metadata["batcher.openai.endpoint"] != "/v1/chat/completions" || j.Metadata["batcher.openai.input_file_id"] != id {
		t.Errorf("job metadata = %v, want the endpoint and input file kept", j.Metadata)
	}
}

// TestBatchesCreateRefused: every bad request is a 400 or 404 naming its
// param, and reaches no job.
func TestBatchesCreateRefused(t *testing.T) {
	e := newBatchesEnv(t)
	batchFile := e.upload(t, "batch", fmt.Sprintf(chatLine, "a", "/v1/chat/completions")+"\n")
	other := e.upload(t, "fine-tune", "{}\n")
	var many []string
	for i := range 17 {
		many = append(many, fmt.Sprintf(`"k%d":"v"`, i))
	}
	tests := []struct {
		name, body string
		code       int
		param, msg string
	}{
		{"endpoint", `{"input_file_id":"` + batchFile + `","endpoint":"/v1/images","completion_window":"24h"}`, 400, "endpoint",
			`endpoint "/v1/images" is not supported: use /v1/chat/completions, /v1/completions or /v1/embeddings`},
		{"window", `{"input_file_id":"` + batchFile + `","endpoint":"/v1/embeddings","completion_window":"1h"}`, 400, "completion_window",
			`completion_window "1h" is not supported: use 24h`},
		{"metadata size", createBody(batchFile, `,"metadata":{`+strings.Join(many, ",")+`}`), 400, "metadata", "metadata: must hold at most 16 entries, got 17"},
		{"long value", createBody(batchFile, `,"metadata":{"team":"`+strings.Repeat("v", 513)+`"}`), 400, "metadata", `metadata[team]: must be at most 512 bytes, got 513`},
		{"long key", createBody(batchFile, `,"metadata":{"`+strings.Repeat("k", 65)+`":"v"}`), 400, "metadata", `keys must be 1 to 64 bytes, got 65`},
		{"empty key", createBody(batchFile, `,"metadata":{"":"v"}`), 400, "metadata", `metadata: key "": keys must be 1 to 64 bytes, got 0`},
		{"no file", createBody("", ""), 400, "input_file_id", "input_file_id must be set"},
		{"unknown file", createBody("file-000000000000000000000000", ""), 404, "input_file_id", `no file with id "file-000000000000000000000000"`},
		{"purpose", createBody(other, ""), 400, "input_file_id", fmt.Sprintf(`file %s has purpose "fine-tune", not batch`, other)},
		{"malformed", `{"input_file_id":`, 400, "<null>", "malformed JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := e.do(t, http.MethodPost, "/v1/batches", tt.body)
			ae := decodeError(t, body)
			if code != tt.code || strOrNull(ae.Error.Param) != tt.param || !strings.Contains(ae.Error.Message, tt.msg) || ae.Error.Type != openaiapi.TypeInvalidRequest {
				t.Errorf("%d %s, want %d naming param %s and saying %q", code, body, tt.code, tt.param, tt.msg)
			}
		})
	}
	if len(e.jobs.windows) != 0 {
		t.Errorf("%d jobs begun, want none", len(e.jobs.windows))
	}
}

// TestBatchesJobErrors: each kind of refusal from the jobs is its status,
// type, code and param, with the jobs' message; the jobs quota carries
// Retry-After; a job refused while its lines are added is aborted.
func TestBatchesJobErrors(t *testing.T) {
	quota := &openaiapi.BatchError{Kind: openaiapi.ErrBatchQuota, Message: "quota exceeded: 2 jobs", RetryAfter: 30 * time.Second}
	tests := []struct {
		name                  string
		at                    string // begin, line or finish
		err                   error
		code                  int
		typ, errCode, param   string
		retryAfter, wantAbort string
		msg                   string
	}{
		{"forbidden", "line", &openaiapi.BatchError{Kind: openaiapi.ErrBatchForbidden, Message: "line 1: route m forbidden"},
			403, openaiapi.TypePermission, "forbidden", "input_file_id", "", "abort", "line 1: route m forbidden"},
		{"items quota", "line", &openaiapi.BatchError{Kind: openaiapi.ErrBatchItemsQuota, Message: "the input file has more than 1 items"},
			400, openaiapi.TypeInvalidRequest, "items_per_job_quota", "input_file_id", "", "abort", "the input file has more than 1 items"},
		{"jobs quota", "begin", quota, 429, openaiapi.TypeRateLimit, "jobs_quota", "<null>", "30", "", "quota exceeded: 2 jobs"},
		// A BatchError wrapped by the store still answers with its own message.
		{"invalid", "finish", fmt.Errorf("jobs: wrapped: %w", &openaiapi.BatchError{Kind: openaiapi.ErrBatchInvalid, Message: "the input file holds no requests"}),
			400, openaiapi.TypeInvalidRequest, "<null>", "input_file_id", "", "", "the input file holds no requests"},
		{"closed", "begin", &openaiapi.BatchError{Kind: openaiapi.ErrBatchClosed, Message: "server shutting down"},
			503, openaiapi.TypeUnavailable, "shutting_down", "<null>", "", "", "server shutting down"},
		// The store's own text (a path, a driver's error) stays off the wire.
		{"other", "line", errors.New("jobs: disk on fire at /var/lib/x"), 500, openaiapi.TypeServer, "<null>", "<null>", "", "abort", "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newBatchesEnv(t)
			switch tt.at {
			case "begin":
				e.jobs.beginErr = tt.err
			case "line":
				e.jobs.lineErr = tt.err
			case "finish":
				e.jobs.finishErr = tt.err
			}
			id := e.upload(t, "batch", fmt.Sprintf(chatLine, "a", "/v1/chat/completions")+"\n")
			code, h, body := e.do(t, http.MethodPost, "/v1/batches", createBody(id, ""))
			ae := decodeError(t, body)
			msg := tt.msg
			if code != tt.code || ae.Error.Type != tt.typ || strOrNull(ae.Error.Code) != tt.errCode || strOrNull(ae.Error.Param) != tt.param || ae.Error.Message != msg {
				t.Errorf("%d %s, want %d type %s code %s param %s message %q", code, body, tt.code, tt.typ, tt.errCode, tt.param, msg)
			}
			if got := h.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if aborted := e.jobs.aborted > 0; aborted != (tt.wantAbort != "") {
				t.Errorf("aborted = %d, want abort %v", e.jobs.aborted, tt.wantAbort != "")
			}
		})
	}
}

// TestBatchesReadAndList: get and cancel answer the batch or 404 naming
// batch_id; list pages newest first with first_id, last_id and has_more;
// a bad limit or after is a 400 naming it.
func TestBatchesReadAndList(t *testing.T) {
	e := newBatchesEnv(t)
	for i := 1; i <= 3; i++ {
		e.jobs.add(&openaiapi.BatchJob{ID: fmt.Sprintf("b%d", i), Status: openaiapi.BatchInProgress, CreatedAt: time.Unix(int64(i), 0)})
	}
	if code, _, body := e.do(t, http.MethodGet, "/v1/batches/b2", ""); code != 200 || !strings.Contains(body, `"id":"b2"`) {
		t.Errorf("get: %d %s", code, body)
	}
	code, _, body := e.do(t, http.MethodPost, "/v1/batches/b2/cancel", "")
	if code != 200 || !strings.Contains(body, `"status":"cancelling"`) || !strings.Contains(body, `"cancelling_at":1700000100`) {
		t.Errorf("cancel: %d %s", code, body)
	}
	for _, call := range [][2]string{{http.MethodGet, "/v1/batches/nope"}, {http.MethodPost, "/v1/batches/nope/cancel"}} {
		code, _, body := e.do(t, call[0], call[1], "")
		if ae := decodeError(t, body); code != 404 || strOrNull(ae.Error.Param) != "batch_id" || ae.Error.Message != `no batch with id "nope"` {
			t.Errorf("%s %s: %d %s, want 404 naming batch_id", call[0], call[1], code, body)
		}
	}
	var page struct {
		Object  string `json:"object"`
		Data    []struct{ ID string }
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
		HasMore bool    `json:"has_more"`
	}
	code, _, body = e.do(t, http.MethodGet, "/v1/batches?limit=2", "")
	if err := json.Unmarshal([]byte(body), &page); err != nil || code != 200 {
		t.Fatalf("list: %d %s", code, body)
	}
	if page.Object != "list" || len(page.Data) != 2 || page.Data[0].ID != "b3" || strOrNull(page.FirstID) != "b3" || strOrNull(page.LastID) != "b2" || !page.HasMore {
		t.Errorf("first page = %s", body)
	}
	code, _, body = e.do(t, http.MethodGet, "/v1/batches?limit=2&after=b2", "")
	page.Data, page.HasMore = nil, true
	if err := json.Unmarshal([]byte(body), &page); err != nil || code != 200 || len(page.Data) != 1 || page.Data[0].ID != "b1" || page.HasMore {
		t.Errorf("second page: %d %s", code, body)
	}
	for _, tt := range []struct{ query, param string }{{"limit=0", "limit"}, {"limit=101", "limit"}, {"limit=x", "limit"}, {"after=zz", "after"}} {
		code, _, body := e.do(t, http.MethodGet, "/v1/batches?"+tt.query, "")
		if ae := decodeError(t, body); code != 400 || strOrNull(ae.Error.Param) != tt.param {
			t.Errorf("list ?%s: %d %s, want 400 naming %s", tt.query, code, body, tt.param)
		}
	}
}

// TestBatchesOnlyBatches: a job not created through the Batch API (over
// gRPC, by batcherctl) is not listed, and getting, cancelling or paging
// after it is as for an unknown id; the store passes over them in its
// query, so a page is one read of the store for one more than the limit,
// however many jobs the caller has.
func TestBatchesOnlyBatches(t *testing.T) {
	e := newBatchesEnv(t)
	e.jobs.add(&openaiapi.BatchJob{ID: "b1", Status: openaiapi.BatchInProgress})
	for i := range 250 { // more than one read of the store
		e.jobs.add(&openaiapi.BatchJob{ID: fmt.Sprintf("g%d", i), Status: openaiapi.BatchInProgress, Metadata: map[string]string{"team": "x"}})
	}
	e.jobs.add(&openaiapi.BatchJob{ID: "b2", Status: openaiapi.BatchInProgress})
	e.jobs.add(&openaiapi.BatchJob{ID: "g-new", Status: openaiapi.BatchInProgress, Metadata: map[string]string{}})
	var page struct {
		Data    []struct{ ID string }
		HasMore bool `json:"has_more"`
	}
	ids := func(body string) string {
		t.Helper()
		page.Data, page.HasMore = nil, false
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("list: %v: %s", err, body)
		}
		var out []string
		for _, d := range page.Data {
			out = append(out, d.ID)
		}
		return strings.Join(out, ",")
	}
	if code, _, body := e.do(t, http.MethodGet, "/v1/batches", ""); code != 200 || ids(body) != "b2,b1" || page.HasMore {
		t.Errorf("list: %d %s, want b2,b1 alone", code, body)
	}
	if code, _, body := e.do(t, http.MethodGet, "/v1/batches?limit=1", ""); code != 200 || ids(body) != "b2" || !page.HasMore {
		t.Errorf("list limit=1: %d %s, want b2 and has_more", code, body)
	}
	if code, _, body := e.do(t, http.MethodGet, "/v1/batches?limit=1&after=b2", ""); code != 200 || ids(body) != "b1" || page.HasMore {
		t.Errorf("list after b2: %d %s, want b1 alone", code, body)
	}
	if got := e.jobs.listLimits; !slices.Equal(got, []int{21, 2, 2}) {
		t.Errorf("the store was read for %v, want one read a page of limit+1 (21, 2, 2)", got)
	}
	for _, call := range [][2]string{{http.MethodGet, "/v1/batches/g7"}, {http.MethodPost, "/v1/batches/g7/cancel"}} {
		code, _, body := e.do(t, call[0], call[1], "")
		if ae := decodeError(t, body); code != 404 || ae.Error.Message != `no batch with id "g7"` {
			t.Errorf("%s %s: %d %s, want 404", call[0], call[1], code, body)
		}
	}
	if j, _ := e.jobs.Get(context.Background(), "g7"); j.Status != openaiapi.BatchInProgress {
		t.Errorf("cancel of a non-batch job changed it: %+v", j)
	}
	if code, _, body := e.do(t, http.MethodGet, "/v1/batches?after=g7", ""); code != 400 || strOrNull(decodeError(t, body).Error.Param) != "after" {
		t.Errorf("list after a non-batch job: %d %s, want 400 naming after", code, body)
	}
}

// TestBatchesCancelEnded: cancelling a batch that has ended is a 400
// invalid_request_error naming its status, as OpenAI answers, and leaves
// it as it was; one still running goes cancelling.
func TestBatchesCancelEnded(t *testing.T) {
	e := newBatchesEnv(t)
	ended := []string{openaiapi.BatchCompleted, openaiapi.BatchFailed, openaiapi.BatchExpired, openaiapi.BatchCancelled}
	for i, st := range ended {
		e.jobs.add(&openaiapi.BatchJob{ID: fmt.Sprintf("e%d", i), Status: st, CreatedAt: time.Unix(1, 0), EndedAt: time.Unix(2, 0)})
	}
	e.jobs.add(&openaiapi.BatchJob{ID: "run", Status: openaiapi.BatchInProgress, CreatedAt: time.Unix(1, 0)})
	for i, st := range ended {
		id := fmt.Sprintf("e%d", i)
		code, _, body := e.do(t, http.MethodPost, "/v1/batches/"+id+"/cancel", "")
		ae := decodeError(t, body)
		want := "Cannot cancel a batch with status '" + st + "'"
		if code != http.StatusBadRequest || ae.Error.Type != openaiapi.TypeInvalidRequest || ae.Error.Message != want {
			t.Errorf("cancel %s: %d %s, want 400 %q", st, code, body, want)
		}
		if j, _ := e.jobs.Get(context.Background(), id); j.Status != st || !j.CancellingAt.IsZero() {
			t.Errorf("cancel %s changed the job: %+v", st, j)
		}
	}
	code, _, body := e.do(t, http.MethodPost, "/v1/batches/run/cancel", "")
	if code != http.StatusOK || !strings.Contains(body, `"status":"cancelling"`) {
		t.Errorf("cancel in_progress: %d %s", code, body)
	}
}

// TestBatchesOutputFiles: an ended batch's non-empty output files are
// registered under ids derived from the job's, the same on every read, and
// serve the job's content; an empty one is null; a failed batch lists its
// error; the end time goes in the field of its state.
func TestBatchesOutputFiles(t *testing.T) {
	e := newBatchesEnv(t)
	dir := t.TempDir()
	results, errs := filepath.Join(dir, "results.jsonl"), filepath.Join(dir, "errors.jsonl")
	if err := os.WriteFile(results, []byte(`{"custom_id":"a"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(errs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	end := time.Unix(1_700_000_500, 0)
	e.jobs.add(&openaiapi.BatchJob{ID: "done", Tenant: "t", Status: openaiapi.BatchCompleted, EndedAt: end, ResultsPath: results, ErrorsPath: errs,
		Deadline: time.Unix(1_700_086_400, 0), Total: 1, Completed: 1})
	e.jobs.add(&openaiapi.BatchJob{ID: "bad", Status: openaiapi.BatchFailed, EndedAt: end, Error: "the input was lost"})
	type object struct {
		Status       string  `json:"status"`
		OutputFileID *string `json:"output_file_id"`
		ErrorFileID  *string `json:"error_file_id"`
		CompletedAt  *int64  `json:"completed_at"`
		FailedAt     *int64  `json:"failed_at"`
		ExpiresAt    *int64  `json:"expires_at"`
		Errors       *struct {
			Data []struct{ Code, Message string }
		} `json:"errors"`
	}
	read := func(id string) object {
		code, _, body := e.do(t, http.MethodGet, "/v1/batches/"+id, "")
		var o object
		if err := json.Unmarshal([]byte(body), &o); err != nil || code != 200 {
			t.Fatalf("get %s: %d %s", id, code, body)
		}
		return o
	}
	o := read("done")
	if o.OutputFileID == nil || o.ErrorFileID != nil || o.CompletedAt == nil || *o.CompletedAt != end.Unix() || o.FailedAt != nil || o.ExpiresAt == nil {
		t.Fatalf("completed batch = %+v", o)
	}
	if again := read("done"); again.OutputFileID == nil || *again.OutputFileID != *o.OutputFileID {
		t.Errorf("output file id changed between reads: %v then %v", *o.OutputFileID, again.OutputFileID)
	}
	info, f, err := e.files.Open(*o.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	content, _ := io.ReadAll(f)
	_ = f.Close()
	if string(content) != `{"custom_id":"a"}`+"\n" || info.Tenant != "t" || info.Purpose != "batch_output" || info.Filename != "done_results.jsonl" {
		t.Errorf("output file %+v holds %q", info, content)
	}
	o = read("bad")
	if o.FailedAt == nil || o.OutputFileID != nil || o.Errors == nil || len(o.Errors.Data) != 1 || o.Errors.Data[0].Message != "the input was lost" || o.Errors.Data[0].Code != "failed" {
		t.Errorf("failed batch = %+v", o)
	}
}

// TestBatchesReadErrors: a store failing a get, a cancel or a list
// answers in OpenAI's shape, by the error's kind; its own text stays off
// the wire.
func TestBatchesReadErrors(t *testing.T) {
	closed := &openaiapi.BatchError{Kind: openaiapi.ErrBatchClosed, Message: "server shutting down"}
	other := errors.New("jobs: sql: connection refused")
	for _, tt := range []struct {
		name, method, path string
		get, list          error
		code               int
		typ, msg           string
	}{
		{"get closed", http.MethodGet, "/v1/batches/b1", closed, nil, 503, openaiapi.TypeUnavailable, "server shutting down"},
		{"get other", http.MethodGet, "/v1/batches/b1", other, nil, 500, openaiapi.TypeServer, "internal error"},
		{"cancel closed", http.MethodPost, "/v1/batches/b1/cancel", closed, nil, 503, openaiapi.TypeUnavailable, "server shutting down"},
		{"cancel other", http.MethodPost, "/v1/batches/b1/cancel", other, nil, 500, openaiapi.TypeServer, "internal error"},
		{"list closed", http.MethodGet, "/v1/batches", nil, closed, 503, openaiapi.TypeUnavailable, "server shutting down"},
		{"list other", http.MethodGet, "/v1/batches", nil, other, 500, openaiapi.TypeServer, "internal error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newBatchesEnv(t)
			e.jobs.getErr, e.jobs.listErr = tt.get, tt.list
			code, _, body := e.do(t, tt.method, tt.path, "")
			if ae := decodeError(t, body); code != tt.code || ae.Error.Type != tt.typ || ae.Error.Message != tt.msg {
				t.Errorf("%d %s, want %d %s %q", code, body, tt.code, tt.typ, tt.msg)
			}
		})
	}
}
