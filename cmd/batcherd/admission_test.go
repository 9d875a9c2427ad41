package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/openaiapi"
)

// restrictedTenant may use sim-embed only, at DEFERRABLE only, in refuse
// mode: every door must refuse it sim-chat, and anything more urgent than
// DEFERRABLE, before the core or the job store sees the request.
const restrictedTenant = `  - name: restricted
    tokens: [%s]
    routes: [sim-embed]
    max_priority: deferrable
    priority_mode: refuse
`

// refusal is what one door answered: a gRPC status or an HTTP status and
// body.
type refusal struct {
	err  error // gRPC
	code int   // HTTP
	body string
}

// admissionDoor is one way into batcherd that takes a model call: a row of
// TestEveryDoorAdmits. route sends something naming the route sim-chat,
// which the restricted tenant may not use; priority something on its
// sim-embed above its DEFERRABLE ceiling; allowed something it may do.
type admissionDoor struct {
	name string
	// method is the gRPC method the door is, or "" for an HTTP door; the
	// test fails for a method carrying a Request or a JobSpec that no row
	// names, so that a new door cannot be added without a row.
	method string
	// endpoint is the front door's path, for the rows of HTTP doors: every
	// endpoint a batch may name must have a row.
	endpoint string
	route    func(t *testing.T, e *tenantsEnv, tok string) refusal
	priority func(t *testing.T, e *tenantsEnv, tok string) refusal // nil: the door has no priority above DEFERRABLE
	allowed  func(t *testing.T, e *tenantsEnv, tok string) refusal // nil: nothing this tenant may send there
}

func chatItem(model string) *batcherv1.Request {
	return &batcherv1.Request{Model: model, Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{
		Messages: []*batcherv1.ChatMessage{{Role: "user", Content: "hi"}}}}}
}

func embedItem(model string, p batcherv1.Priority) *batcherv1.Request {
	return &batcherv1.Request{Id: "e1", Model: model, Priority: p, Input: &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: "hi"}}}
}

func (e *tenantsEnv) submit(t *testing.T, tok string, r *batcherv1.Request) refusal {
	_, err := batcherv1.NewBatcherServiceClient(e.conn(t, tok)).Submit(t.Context(), &batcherv1.SubmitRequest{Request: r})
	return refusal{err: err}
}

// stream sends r on a SubmitStream and returns its Rejection's status, or
// nil when it completed.
func (e *tenantsEnv) stream(t *testing.T, tok string, r *batcherv1.Request) refusal {
	if r.Id == "" {
		r.Id = "s1"
	}
	s, err := batcherv1.NewBatcherServiceClient(e.conn(t, tok)).SubmitStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: r}}); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseSend()
	var got error
	answered := false
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch {
		case m.GetRejection() != nil:
			got, answered = status.FromProto(m.GetRejection().GetError()).Err(), true
		case m.GetCompletion() != nil:
			got, answered = status.FromProto(m.GetCompletion().GetError()).Err(), true
		}
	}
	if !answered {
		t.Fatal("stream: no answer")
	}
	return refusal{err: got}
}

// streamed calls SubmitStreamed with r and returns its status.
func (e *tenantsEnv) streamed(t *testing.T, tok string, r *batcherv1.Request) refusal {
	s, err := batcherv1.NewBatcherServiceClient(e.conn(t, tok)).SubmitStreamed(t.Context(), &batcherv1.SubmitStreamedRequest{Request: r})
	if err != nil {
		return refusal{err: err}
	}
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return refusal{err: err}
		}
	}
}

// createJob sends spec and one message of items and returns CreateJob's
// status.
func (e *tenantsEnv) createJob(t *testing.T, tok string, spec *batcherv1.JobSpec, items *batcherv1.JobItems) refusal {
	st, err := batcherv1.NewJobServiceClient(e.conn(t, tok)).CreateJob(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: spec}})
	_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: items}})
	_, err = st.CloseAndRecv()
	return refusal{err: err}
}

func items(rs ...*batcherv1.Request) *batcherv1.JobItems { return &batcherv1.JobItems{Requests: rs} }

// post sends a JSON body to the front door with the restricted priority
// header when priority is set.
func (e *tenantsEnv) post(t *testing.T, tok, path, body, priority string) refusal {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://"+e.httpAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	if priority != "" {
		req.Header.Set("X-Batcher-Priority", priority)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.pool, MinVersion: tls.VersionTLS12}}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return refusal{code: resp.StatusCode, body: string(b)}
}

// batch uploads lines as a batch file and creates a batch of them.
func (e *tenantsEnv) batch(t *testing.T, tok, endpoint string, lines ...string) refusal {
	return e.batchWith(t, tok, endpoint, "", lines...)
}

// batchWith is batch with extra fields (`,"metadata": {...}`) in the
// create body.
func (e *tenantsEnv) batchWith(t *testing.T, tok, endpoint, extra string, lines ...string) refusal {
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	_, _ = io.WriteString(fw, strings.Join(lines, "\n")+"\n")
	_ = mw.Close()
	code, body := e.do(t, "POST", "https://"+e.httpAddr+"/v1/files", tok, mw.FormDataContentType(), &form)
	var file struct{ ID string }
	if code != 200 || json.Unmarshal([]byte(body), &file) != nil {
		t.Fatalf("upload: %d %s", code, body)
	}
	return e.post(t, tok, "/v1/batches", `{"input_file_id": "`+file.ID+`", "endpoint": "`+endpoint+`", "completion_window": "24h"`+extra+`}`, "")
}

func batchLine(id, url, body string) string {
	return fmt.Sprintf(`{"custom_id": %q, "method": "POST", "url": %q, "body": %s}`, id, url, body)
}

const (
	chatBody  = `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}`
	embedBody = `{"model": "sim-embed", "input": "hi"}`
)

func admissionDoors() []admissionDoor {
	deferrable := batcherv1.Priority_PRIORITY_DEFERRABLE
	embedSpec := &batcherv1.JobSpec{Model: "sim-embed"}
	return []admissionDoor{
		{
			name: "Submit", method: batcherv1.BatcherService_Submit_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal { return e.submit(t, tok, chatItem("sim-chat")) },
			priority: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.submit(t, tok, embedItem("sim-embed", 0))
			},
			allowed: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.submit(t, tok, embedItem("sim-embed", deferrable))
			},
		},
		{
			name: "SubmitStream", method: batcherv1.BatcherService_SubmitStream_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal { return e.stream(t, tok, chatItem("sim-chat")) },
			priority: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.stream(t, tok, embedItem("sim-embed", batcherv1.Priority_PRIORITY_HIGH))
			},
			allowed: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.stream(t, tok, embedItem("sim-embed", deferrable))
			},
		},
		{
			name: "SubmitStreamed", method: batcherv1.BatcherService_SubmitStreamed_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal { return e.streamed(t, tok, chatItem("sim-chat")) },
			priority: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.streamed(t, tok, chatItem("sim-embed"))
			},
		},
		{
			name: "CreateJob items", method: batcherv1.JobService_CreateJob_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				// The second item names the forbidden route: the whole job is refused.
				return e.createJob(t, tok, embedSpec, items(embedItem("", 0), chatItem("sim-chat")))
			},
			priority: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-embed", Priority: batcherv1.Priority_PRIORITY_LOW}, items(embedItem("", 0)))
			},
			allowed: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.createJob(t, tok, embedSpec, items(embedItem("", 0)))
			},
		},
		{
			name: "CreateJob spec model", method: batcherv1.JobService_CreateJob_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-chat"}, items(embedItem("sim-embed", 0)))
			},
		},
		{
			name: "CreateJob OpenAI lines", method: batcherv1.JobService_CreateJob_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.createJob(t, tok, &batcherv1.JobSpec{}, &batcherv1.JobItems{OpenaiLines: []*batcherv1.OpenAIBatchLine{
					{Line: []byte(batchLine("l1", "/v1/chat/completions", chatBody))}}})
			},
		},
		{
			name: "CreateJob run groups", method: batcherv1.JobService_CreateJob_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-embed", RunGroups: []*batcherv1.RunGroup{
					{Name: "ok", Model: "sim-embed"}, {Name: "other", Model: "sim-chat"}}}, items(embedItem("", 0)))
			},
		},
		{
			name: "CreateJob run group next_model", method: batcherv1.JobService_CreateJob_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-embed", RunGroups: []*batcherv1.RunGroup{
					{Name: "g", Model: "sim-embed", NextModel: "sim-chat"}}}, items(embedItem("", 0)))
			},
		},
		{
			name: "CreateJob judge", method: batcherv1.JobService_CreateJob_FullMethodName,
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-embed", Judge: &batcherv1.Judge{Model: "sim-chat", PromptTemplate: "{{.Input}}"}},
					items(embedItem("", 0)))
			},
		},
		{
			name: "/v1/chat/completions", endpoint: "/v1/chat/completions",
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.post(t, tok, "/v1/chat/completions", chatBody, "")
			},
		},
		{
			name: "/v1/completions", endpoint: "/v1/completions",
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.post(t, tok, "/v1/completions", `{"model": "sim-completion", "prompt": "hi", "max_tokens": 4}`, "")
			},
		},
		{
			name: "/v1/embeddings", endpoint: "/v1/embeddings",
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.post(t, tok, "/v1/embeddings", `{"model": "sim-chat", "input": "hi"}`, "deferrable")
			},
			priority: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.post(t, tok, "/v1/embeddings", embedBody, "")
			},
			allowed: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.post(t, tok, "/v1/embeddings", embedBody, "deferrable")
			},
		},
		{
			name: "/v1/batches", endpoint: "/v1/batches",
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.batch(t, tok, "/v1/chat/completions", batchLine("a", "/v1/chat/completions", chatBody), batchLine("b", "/v1/chat/completions", chatBody))
			},
			// A batch runs at DEFERRABLE, the lowest priority: no ceiling is below it.
			allowed: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.batch(t, tok, "/v1/embeddings", batchLine("a", "/v1/embeddings", embedBody))
			},
		},
		{
			name: "/v1/batches of embeddings naming a chat route", endpoint: "/v1/batches",
			route: func(t *testing.T, e *tenantsEnv, tok string) refusal {
				return e.batch(t, tok, "/v1/embeddings", batchLine("a", "/v1/embeddings", embedBody), batchLine("b", "/v1/embeddings", `{"model": "sim-chat", "input": "x"}`))
			},
		},
	}
}

// TestEveryDoorAdmits: the restricted tenant is refused a route it may not
// use and a priority above its ceiling at every door, with
// PERMISSION_DENIED or 403 naming the route or the priority (and, for a
// job or a batch, the line), and nothing is stored; what it may do passes.
// Every gRPC method whose request carries a Request or a JobSpec, and
// every endpoint a batch may name, must have a row.
func TestEveryDoorAdmits(t *testing.T) {
	e := startTenants(t)
	tok := e.tokR
	doors := admissionDoors()

	methods, endpoints := map[string]bool{}, map[string]bool{}
	for _, d := range doors {
		methods[d.method] = true
		endpoints[d.endpoint] = true
	}
	for _, m := range requestMethods(t) {
		if !methods[m] {
			t.Errorf("gRPC method %s carries a Request or a JobSpec but has no row in admissionDoors", m)
		}
	}
	for _, ep := range openaiapi.BatchEndpoints() {
		if !endpoints[ep] {
			t.Errorf("front door endpoint %s has no row in admissionDoors", ep)
		}
	}
	if !endpoints["/v1/batches"] {
		t.Error("/v1/batches has no row")
	}

	refused := func(t *testing.T, r refusal, what string) {
		t.Helper()
		if r.err != nil || r.code == 0 {
			if s := status.Convert(r.err); s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), what) {
				t.Errorf("got %v, want PERMISSION_DENIED naming %s", r.err, what)
			}
			return
		}
		if r.code != http.StatusForbidden || !strings.Contains(r.body, what) || !strings.Contains(r.body, "permission_error") {
			t.Errorf("got %d %s, want 403 naming %s", r.code, r.body, what)
		}
	}
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			refused(t, d.route(t, e, tok), `"sim-`)
			if d.priority != nil {
				r := d.priority(t, e, tok)
				refused(t, r, "ceiling deferrable")
				// The front door names what set the priority: here nothing
				// did, and the header is how to choose one.
				if r.code != 0 && d.endpoint != "/v1/batches" && !strings.Contains(r.body, `"param":"X-Batcher-Priority"`) {
					t.Errorf("403 for a priority: %s, want param X-Batcher-Priority", r.body)
				}
			}
			if d.allowed != nil {
				if r := d.allowed(t, e, tok); r.err != nil || (r.code != 0 && r.code != http.StatusOK) {
					t.Errorf("allowed call refused: %v %d %s", r.err, r.code, r.body)
				}
			}
		})
	}
	// A job naming a forbidden route names its item as sent (a batch, its line).
	second := embedItem("", 0)
	second.Id = "e2" // custom ids are unique in a job
	r := e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-embed"}, items(embedItem("", 0), second, chatItem("sim-chat")))
	if s := status.Convert(r.err); !strings.Contains(s.Message(), "requests[2]") {
		t.Errorf("refused job %v does not name requests[2]", r.err)
	}
	r = e.batch(t, tok, "/v1/embeddings", batchLine("a", "/v1/embeddings", embedBody), batchLine("second", "/v1/embeddings", `{"model": "sim-chat", "input": "x"}`))
	if !strings.Contains(r.body, "line 2") || !strings.Contains(r.body, "second") {
		t.Errorf("refused batch %d %s does not name line 2 and its custom_id", r.code, r.body)
	}

	// Nothing refused was stored: the tenant's only jobs are its allowed ones
	// (CreateJob items, and the embeddings batch).
	page, err := batcherv1.NewJobServiceClient(e.conn(t, tok)).ListJobs(t.Context(), &batcherv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page.GetJobs()); n != 2 {
		t.Errorf("the restricted tenant has %d jobs, want the 2 allowed ones: %v", n, page.GetJobs())
	}
	e.finish(t)
}

// requestMethods lists the gRPC methods of package batcher.v1 whose
// request message holds a Request or a JobSpec, at any depth.
func requestMethods(t *testing.T) []string {
	t.Helper()
	var out []string
	protoregistry.GlobalFiles.RangeFilesByPackage("batcher.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				if carriesRequest(md.Input(), map[protoreflect.FullName]bool{}) {
					out = append(out, fmt.Sprintf("/%s/%s", sd.FullName(), md.Name()))
				}
			}
		}
		return true
	})
	if len(out) < 3 {
		t.Fatalf("found only %v: the proto registry walk is broken", out)
	}
	return out
}

func carriesRequest(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	switch md.FullName() {
	case "batcher.v1.Request", "batcher.v1.JobSpec":
		return true
	}
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	for i := range md.Fields().Len() {
		if f := md.Fields().Get(i).Message(); f != nil && carriesRequest(f, seen) {
			return true
		}
	}
	return false
}
