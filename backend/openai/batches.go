package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/batcher"
)

// OpenAI's Batch API limits.
const (
	BatchMaxRequests = 50_000
	BatchMaxBytes    = 200 << 20
	BatchWindow      = 24 * time.Hour
	// batchMaxLine bounds one line of an output or error file.
	batchMaxLine = 64 << 20
)

// Batches is the Backend's account seen through OpenAI's Batch API:
// /v1/files (purpose batch) and /v1/batches. It shares the Backend's base
// URL, key, headers and connection pool. Its calls honour only their
// context, not Config.Timeout: an upload of 200 MB takes its time.
type Batches struct {
	b *Backend
}

var _ batchapi.Upstream = (*Batches)(nil)

// Batches returns the Backend's batch API.
func (b *Backend) Batches() *Batches { return &Batches{b: b} }

// Limits returns OpenAI's: 50,000 requests and 200 MB a file, 24h.
func (u *Batches) Limits() batchapi.Limits {
	return batchapi.Limits{MaxRequests: BatchMaxRequests, MaxBytes: BatchMaxBytes, Window: BatchWindow, Files: true, Tagged: true}
}

// batchLine is one input line.
type batchLine struct {
	CustomID string `json:"custom_id"`
	Method   string `json:"method"`
	URL      string `json:"url"`
	Body     any    `json:"body"`
}

type batchEncoder struct {
	u   *Batches
	w   io.Writer
	buf bytes.Buffer
}

// NewEncoder returns an encoder of OpenAI batch input lines.
func (u *Batches) NewEncoder(w io.Writer) batchapi.Encoder { return &batchEncoder{u: u, w: w} }

// Encode writes one input line: the body the online call would send.
func (e *batchEncoder) Encode(r *batchapi.Request) (int, error) {
	if r.CustomID == "" {
		return 0, fmt.Errorf("%w: custom_id: must not be empty", batcher.ErrInvalid)
	}
	req := r.Req
	one := &batcher.Batch{Model: r.Model, Op: req.Input.Op, Requests: []*batcher.Request{req}, MaxTokens: r.MaxTokens}
	mt := req.Params.MaxTokens
	if mt == 0 {
		mt = r.MaxTokens
	}
	var body any
	switch req.Input.Op {
	case batcher.OpChat:
		body = e.u.b.newChatRequest(one, 0, wireMessages(req.Input.Messages), mt)
	case batcher.OpCompletion:
		cr := completionRequest{Model: r.Model, Prompt: []string{req.Input.Prompt}, MaxTokens: mt}
		setParams(&cr.Temperature, &cr.TopP, &cr.Stop, &cr.Seed, &req.Params)
		body = cr
	case batcher.OpEmbedding:
		body = embeddingRequest{Model: r.Model, Input: []string{req.Input.Text}, EncodingFormat: "float"}
	default:
		return 0, fmt.Errorf("%w: operation %v has no batch endpoint", batchapi.ErrUnsupported, req.Input.Op)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, fmt.Errorf("%w: custom_id %s: cannot be encoded: %w", batcher.ErrInvalid, r.CustomID, err)
	}
	raw = withExtra(raw, body)
	e.buf.Reset()
	if err := json.NewEncoder(&e.buf).Encode(batchLine{CustomID: r.CustomID, Method: http.MethodPost,
		URL: batchapi.Endpoint(req.Input.Op), Body: json.RawMessage(raw)}); err != nil {
		return 0, fmt.Errorf("%w: custom_id %s: cannot be encoded: %w", batcher.ErrInvalid, r.CustomID, err)
	}
	return e.w.Write(e.buf.Bytes())
}

// call makes one call to the files or batches API and decodes a JSON
// answer into resp (unless nil). body, when set, is sent with ctype.
func (u *Batches) call(ctx context.Context, method, path string, query url.Values, body io.Reader, ctype string, resp any) error {
	res, err := u.open(ctx, method, path, query, body, ctype)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	ep := u.b.cfg.endpointPath(path)
	data, err := u.b.readBody(ctx, ep, res)
	if err != nil {
		return err
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return invalidResponse(res.StatusCode, ep, "JSON of an unexpected shape", err)
	}
	return nil
}

// open makes a call and returns its response when its status is 2xx; the
// caller closes its body.
func (u *Batches) open(ctx context.Context, method, path string, query url.Values, body io.Reader, ctype string) (*http.Response, error) {
	b := u.b
	ep := b.cfg.endpointPath(path)
	target := b.cfg.endpoint(path)
	if len(query) > 0 {
		t, _ := url.Parse(target) // built from a parsed URL
		q := t.Query()
		for k, v := range query {
			q[k] = v
		}
		t.RawQuery = q.Encode()
		target = t.String()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "request cannot be built", Err: err}
	}
	b.setHeaders(req.Header, ctype)
	res, err := b.client.Do(req)
	if err != nil {
		return nil, transportError(ctx, ep, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		defer func() { _ = res.Body.Close() }()
		data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		if res.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("%w: %w", batchapi.ErrNotFound, b.statusError(res.StatusCode, ep, data, nil))
		}
		return nil, b.statusError(res.StatusCode, ep, data, ParseRateLimit(res.Header, time.Now()))
	}
	return res, nil
}

type wireFile struct {
	ID       string `json:"id"`
	Filename string `json:"filename"`
	Bytes    int64  `json:"bytes"`
	Purpose  string `json:"purpose"`
	Created  int64  `json:"created_at"`
}

func (f *wireFile) file() *batchapi.File {
	return &batchapi.File{ID: f.ID, Name: f.Filename, Bytes: f.Bytes}
}

// Upload streams r as a multipart body to /files with purpose batch.
func (u *Batches) Upload(ctx context.Context, name string, r io.Reader, size int64) (*batchapi.File, error) {
	if size > BatchMaxBytes {
		return nil, fmt.Errorf("%w: file %s: %d bytes, at most %d", batchapi.ErrTooLarge, name, size, BatchMaxBytes)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("purpose", "batch")
		if err == nil {
			var part io.Writer
			if part, err = mw.CreateFormFile("file", name); err == nil {
				_, err = io.Copy(part, r)
			}
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	var f wireFile
	err := u.call(ctx, http.MethodPost, "/files", nil, pr, mw.FormDataContentType(), &f)
	pr.CloseWithError(errors.New("upload ended")) // unblocks the writer if the call ended first
	if err != nil {
		return nil, err
	}
	return f.file(), nil
}

// FindFile pages through the batch files, newest first, for name.
func (u *Batches) FindFile(ctx context.Context, name string) (*batchapi.File, error) {
	after := ""
	for range 50 {
		q := url.Values{"purpose": {"batch"}, "limit": {"100"}, "order": {"desc"}}
		if after != "" {
			q.Set("after", after)
		}
		var page struct {
			Data    []wireFile `json:"data"`
			HasMore bool       `json:"has_more"`
		}
		if err := u.call(ctx, http.MethodGet, "/files", q, nil, "", &page); err != nil {
			return nil, err
		}
		for i := range page.Data {
			if page.Data[i].Filename == name {
				return page.Data[i].file(), nil
			}
		}
		if !page.HasMore || len(page.Data) == 0 {
			break
		}
		after = page.Data[len(page.Data)-1].ID
	}
	return nil, fmt.Errorf("%w: no batch file named %s", batchapi.ErrNotFound, name)
}

type wireBatch struct {
	ID            string            `json:"id"`
	Status        string            `json:"status"`
	InputFileID   string            `json:"input_file_id"`
	OutputFileID  *string           `json:"output_file_id"`
	ErrorFileID   *string           `json:"error_file_id"`
	CreatedAt     int64             `json:"created_at"`
	InProgressAt  *int64            `json:"in_progress_at"`
	ExpiresAt     *int64            `json:"expires_at"`
	Metadata      map[string]string `json:"metadata"`
	RequestCounts struct {
		Total     int64 `json:"total"`
		Completed int64 `json:"completed"`
		Failed    int64 `json:"failed"`
	} `json:"request_counts"`
	Errors *struct {
		Data []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Line    *int   `json:"line"`
		} `json:"data"`
	} `json:"errors"`
}

func unix(p *int64) time.Time {
	if p == nil || *p == 0 {
		return time.Time{}
	}
	return time.Unix(*p, 0)
}

func (w *wireBatch) batch() *batchapi.Batch {
	b := &batchapi.Batch{ID: w.ID, Status: batchapi.Status(w.Status), Metadata: w.Metadata, InputFileID: w.InputFileID,
		CreatedAt: unix(&w.CreatedAt), InProgressAt: unix(w.InProgressAt), ExpiresAt: unix(w.ExpiresAt),
		Counts: batchapi.Counts{Total: w.RequestCounts.Total, Completed: w.RequestCounts.Completed, Failed: w.RequestCounts.Failed}}
	if w.OutputFileID != nil {
		b.OutputFileID = *w.OutputFileID
	}
	if w.ErrorFileID != nil {
		b.ErrorFileID = *w.ErrorFileID
	}
	if w.Errors != nil {
		var buf bytes.Buffer
		for i, e := range w.Errors.Data {
			if i == 5 {
				fmt.Fprintf(&buf, "; and %d more", len(w.Errors.Data)-5)
				break
			}
			if i > 0 {
				buf.WriteString("; ")
			}
			if e.Line != nil {
				fmt.Fprintf(&buf, "line %d: ", *e.Line)
			}
			buf.WriteString(clip(clean(e.Code+": "+e.Message), 200))
		}
		b.Errors = buf.String()
	}
	return b
}

// Create posts /batches over an uploaded file with a 24h window.
func (u *Batches) Create(ctx context.Context, req *batchapi.CreateRequest) (*batchapi.Batch, error) {
	if req.InputFileID == "" {
		return nil, fmt.Errorf("%w: OpenAI batches take an uploaded file (input_file_id)", batchapi.ErrUnsupported)
	}
	if len(req.Metadata) > 16 {
		return nil, fmt.Errorf("%w: metadata: at most 16 entries, got %d", batcher.ErrInvalid, len(req.Metadata))
	}
	body, _ := json.Marshal(map[string]any{"input_file_id": req.InputFileID, "endpoint": req.Endpoint,
		"completion_window": "24h", "metadata": req.Metadata}) // strings only
	var w wireBatch
	if err := u.call(ctx, http.MethodPost, "/batches", nil, bytes.NewReader(body), "application/json", &w); err != nil {
		return nil, err
	}
	return w.batch(), nil
}

// Get reads /batches/{id}.
func (u *Batches) Get(ctx context.Context, id string) (*batchapi.Batch, error) {
	var w wireBatch
	if err := u.call(ctx, http.MethodGet, "/batches/"+url.PathEscape(id), nil, nil, "", &w); err != nil {
		return nil, err
	}
	return w.batch(), nil
}

// Cancel posts /batches/{id}/cancel.
func (u *Batches) Cancel(ctx context.Context, id string) (*batchapi.Batch, error) {
	var w wireBatch
	if err := u.call(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/cancel", nil, nil, "", &w); err != nil {
		return nil, err
	}
	return w.batch(), nil
}

// Find pages through /batches, newest first, back to since ago.
func (u *Batches) Find(ctx context.Context, tags map[string]string, since time.Duration) (*batchapi.Batch, error) {
	var found *batchapi.Batch
	err := u.each(ctx, u.b.now().Add(-since).Unix(), func(w *wireBatch) bool {
		if holds(w.Metadata, tags) {
			found = w.batch()
		}
		return found == nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("%w: no batch tagged %v", batchapi.ErrNotFound, tags)
	}
	return found, nil
}

// List pages through /batches, newest first, back to since (OpenAI's
// created_at is in whole seconds).
func (u *Batches) List(ctx context.Context, since time.Time) ([]*batchapi.Batch, error) {
	var out []*batchapi.Batch
	err := u.each(ctx, since.Unix(), func(w *wireBatch) bool {
		out = append(out, w.batch())
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// each pages through /batches, newest first, calling visit for each batch
// created at or after oldest (unix seconds) until visit returns false.
func (u *Batches) each(ctx context.Context, oldest int64, visit func(*wireBatch) bool) error {
	after := ""
	for range 1000 {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after", after)
		}
		var page struct {
			Data    []wireBatch `json:"data"`
			HasMore bool        `json:"has_more"`
		}
		if err := u.call(ctx, http.MethodGet, "/batches", q, nil, "", &page); err != nil {
			return err
		}
		for i := range page.Data {
			if page.Data[i].CreatedAt < oldest || !visit(&page.Data[i]) {
				return nil
			}
		}
		if !page.HasMore || len(page.Data) == 0 {
			return nil
		}
		after = page.Data[len(page.Data)-1].ID
	}
	return nil
}

func holds(m, tags map[string]string) bool {
	for k, v := range tags {
		if got, ok := m[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Results streams the output file, then the error file.
func (u *Batches) Results(ctx context.Context, b *batchapi.Batch, fn func(*batchapi.Result) error) error {
	for _, id := range []string{b.OutputFileID, b.ErrorFileID} {
		if id == "" {
			continue
		}
		if err := u.readFile(ctx, id, fn); err != nil {
			return err
		}
	}
	return nil
}

func (u *Batches) readFile(ctx context.Context, id string, fn func(*batchapi.Result) error) error {
	path := "/files/" + url.PathEscape(id) + "/content"
	res, err := u.open(ctx, http.MethodGet, path, nil, nil, "")
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64<<10), batchMaxLine)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		r, err := ParseBatchLine(line)
		if err != nil {
			return invalidResponse(res.StatusCode, u.b.cfg.endpointPath(path), "line "+strconv.Itoa(n)+": "+err.Error(), err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return transportError(ctx, u.b.cfg.endpointPath(path), err)
	}
	return nil
}

// outLine is a line of an output or error file.
type outLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ParseBatchLine reads one line of a batch's output or error file. A line
// the upstream answered with an error is a Result with Outcome Failed (or
// Expired, Cancelled by its code); a line that is not one of OpenAI's is an
// error naming what is wrong.
func ParseBatchLine(line []byte) (*batchapi.Result, error) {
	var l outLine
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("not a JSON batch line: %w", err)
	}
	if l.CustomID == "" {
		return nil, errors.New("no custom_id")
	}
	r := &batchapi.Result{CustomID: l.CustomID}
	const ep = "batch output"
	switch {
	case l.Error != nil && l.Error.Code != "":
		r.Outcome = batchapi.Failed
		switch l.Error.Code {
		case "batch_expired":
			r.Outcome = batchapi.Expired
		case "batch_cancelled":
			r.Outcome = batchapi.Cancelled
		}
		r.Resp.Err = &batcher.UpstreamError{Class: batcher.ClassServer, Message: clip(clean(l.Error.Code+": "+l.Error.Message), 300)}
		return r, nil
	case l.Response == nil:
		return nil, errors.New("neither response nor error")
	case l.Response.StatusCode < 200 || l.Response.StatusCode > 299:
		r.Outcome = batchapi.Failed
		ue := &batcher.UpstreamError{Class: StatusClass(l.Response.StatusCode), StatusCode: l.Response.StatusCode,
			Message: fmt.Sprintf("%s (HTTP %d in the batch's error file)", clip(clean(upstreamMessage(l.Response.Body, "")), 300), l.Response.StatusCode)}
		r.Resp.Err = ue
		return r, nil
	}
	var probe struct {
		Object string `json:"object"`
	}
	body := l.Response.Body
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, fmt.Errorf("response body: %w", err)
	}
	switch probe.Object {
	case "list": // embeddings
		var er embeddingResponse
		if err := json.Unmarshal(body, &er); err != nil {
			return nil, fmt.Errorf("embedding body: %w", err)
		}
		if len(er.Data) == 0 {
			return nil, errors.New("embedding body without data")
		}
		p, _ := usageOf(er.Usage)
		r.Resp = batcher.Response{Embedding: er.Data[0].Embedding, Usage: clampUsage(p, 0)}
	case "text_completion":
		var cr completionResponse
		if err := json.Unmarshal(body, &cr); err != nil {
			return nil, fmt.Errorf("completion body: %w", err)
		}
		if len(cr.Choices) == 0 || cr.Choices[0].Text == nil {
			return nil, errors.New("completion body without text")
		}
		p, c := usageOf(cr.Usage)
		r.Resp = batcher.Response{Text: *cr.Choices[0].Text, FinishReason: finishReason(cr.Choices[0].FinishReason), Usage: clampUsage(p, c)}
	default:
		var cr chatResponse
		if err := json.Unmarshal(body, &cr); err != nil {
			return nil, fmt.Errorf("chat body: %w", err)
		}
		p, c := usageOf(cr.Usage)
		if richBody(&cr) {
			resp, err := batchChatAnswer(&cr)
			if err != nil {
				return nil, fmt.Errorf("chat body: %w", err)
			}
			resp.Usage = clampUsage(p, c)
			r.Resp = resp
			return r, nil
		}
		text, fr, err := chatAnswer(&cr, ep)
		if err != nil {
			return nil, err
		}
		r.Resp = batcher.Response{Text: text, FinishReason: fr, Usage: clampUsage(p, c)}
	}
	return r, nil
}

// richBody reports whether a chat body holds more than one plain text
// choice: several choices, tool calls, a refusal or logprobs.
func richBody(cr *chatResponse) bool {
	if len(cr.Choices) > 1 {
		return true
	}
	for i := range cr.Choices {
		c := &cr.Choices[i]
		if len(c.Message.ToolCalls) > 0 || c.Message.Refusal != nil || c.Logprobs != nil {
			return true
		}
	}
	return false
}

// batchChatAnswer reads a rich chat body of a batch's output whole, as the
// online call's answer would be: every choice (in Choices when several),
// its text, tool calls, refusal and logprobs. The request is not at hand,
// so the answer is not checked against it (its tools, its schema). A
// tool call's message may have no content (null): the calls are the
// answer.
func batchChatAnswer(cr *chatResponse) (batcher.Response, error) {
	n := len(cr.Choices)
	choices := make([]batcher.Choice, n)
	seen := make([]bool, n)
	for k := range cr.Choices {
		c := &cr.Choices[k]
		i, m := c.Index, &c.Message
		if i < 0 || i >= n || seen[i] {
			return batcher.Response{}, fmt.Errorf("choice index %d out of place", i)
		}
		seen[i] = true
		if m.Content == nil && m.Refusal == nil && len(m.ToolCalls) == 0 {
			return batcher.Response{}, fmt.Errorf("choice %d has no content", i)
		}
		ch := batcher.Choice{FinishReason: finishReason(c.FinishReason)}
		if m.Content != nil {
			ch.Text = *m.Content
		}
		if m.Refusal != nil {
			ch.Refusal = *m.Refusal
			if ch.FinishReason == batcher.FinishStop {
				ch.FinishReason = batcher.FinishContentFilter
			}
		}
		for _, tc := range m.ToolCalls {
			ch.ToolCalls = append(ch.ToolCalls, batcher.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		if len(ch.ToolCalls) > 0 {
			ch.FinishReason = batcher.FinishToolCalls
		}
		if lp := c.Logprobs; lp != nil {
			ch.Logprobs = &batcher.Logprobs{Content: tokens(lp.Content), Refusal: tokens(lp.Refusal)}
		}
		choices[i] = ch
	}
	c := &choices[0]
	var all []batcher.Choice
	if n > 1 {
		all = choices
	}
	return batcher.Response{Text: c.Text, Chat: batcher.NewChatOutput(c.ToolCalls, c.Refusal, c.Logprobs, all), FinishReason: c.FinishReason}, nil
}
