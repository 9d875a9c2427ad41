package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/security"
)

// tenantsEnv is batcherd over TLS with four tenants: team-a (every
// route), team-b (sim-embed only), ops (admin) and restricted
// (restrictedTenant), a data directory for
// jobs and files, and the three listeners' addresses.
type tenantsEnv struct {
	grpcAddr, httpAddr, adminAddr string
	pool                          *x509.CertPool
	tokA, tokB, tokAdmin, tokR    string
	stop                          func()
	exit                          <-chan int
	logs                          *logScanner
}

func newToken() string {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	return base64.RawURLEncoding.EncodeToString(raw)
}

func startTenants(t *testing.T, extra ...string) *tenantsEnv {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	e := &tenantsEnv{pool: pool, tokA: newToken(), tokB: newToken(), tokAdmin: newToken(), tokR: newToken()}
	tenants := filepath.Join(dir, "tenants.yaml")
	if err := os.WriteFile(tenants, []byte(fmt.Sprintf(`tenants:
  - name: team-a
    tokens: [%s]
    quotas: {jobs: 2}
  - name: team-b
    tokens: [%s]
    routes: [sim-embed]
  - name: ops
    tokens: [%s]
    admin: true
`+restrictedTenant, security.HashToken(e.tokA), security.HashToken(e.tokB), security.HashToken(e.tokAdmin), security.HashToken(e.tokR))), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--listen=127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile, "--tenants", tenants,
		"--data-dir", filepath.Join(dir, "data")}, extra...)
	e.grpcAddr, e.stop, e.exit, e.logs = startInProcess(t, args...)
	for _, line := range strings.Split(e.logs.String(), "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil {
			switch rec.Msg {
			case "http listening":
				e.httpAddr = rec.Addr
			case "admin listening":
				e.adminAddr = rec.Addr
			}
		}
	}
	if e.httpAddr == "" || e.adminAddr == "" {
		t.Fatalf("listeners not logged:\n%s", e.logs)
	}
	return e
}

func (e *tenantsEnv) conn(t *testing.T, token string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: e.pool, MinVersion: tls.VersionTLS12}))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(token)))
	}
	cc, err := grpc.NewClient(e.grpcAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// do sends an HTTPS request with token (none when empty) and returns the
// status and body.
func (e *tenantsEnv) do(t *testing.T, method, url, token, contentType string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.pool, MinVersion: tls.VersionTLS12}}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *tenantsEnv) finish(t *testing.T) {
	t.Helper()
	e.stop()
	if code := <-e.exit; code != exitOK {
		t.Fatalf("exit %d\n%s", code, e.logs)
	}
	for _, tok := range []string{e.tokA, e.tokB, e.tokAdmin, e.tokR} {
		if strings.Contains(e.logs.String(), tok) {
			t.Fatalf("a token reached the log")
		}
	}
}

// TestTenantIsolationGRPC: over TLS with bearer tokens, team-b cannot get,
// watch, cancel, delete, list or read the results of team-a's job (each
// NOT_FOUND, as for an unknown id); WatchStats needs the admin right.
func TestTenantIsolationGRPC(t *testing.T) {
	e := startTenants(t)
	ctx := t.Context()
	a := batcherv1.NewJobServiceClient(e.conn(t, e.tokA))
	b := batcherv1.NewJobServiceClient(e.conn(t, e.tokB))
	st, err := a.CreateJob(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{Model: "sim-chat"}}})
	_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: &batcherv1.JobItems{Requests: []*batcherv1.Request{
		{Id: "x", Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: []*batcherv1.ChatMessage{{Role: "user", Content: "hi"}}}}}}}}})
	created, err := st.CloseAndRecv()
	if err != nil {
		t.Fatalf("CreateJob as team-a: %v\n%s", err, e.logs)
	}
	id := created.GetJob().GetId()

	notFound := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.NotFound {
			t.Errorf("%s as team-b = %v, want NOT_FOUND", what, err)
		}
	}
	_, err = b.GetJob(ctx, &batcherv1.GetJobRequest{Id: id})
	notFound("GetJob", err)
	_, err = b.CancelJob(ctx, &batcherv1.CancelJobRequest{Id: id})
	notFound("CancelJob", err)
	_, err = b.DeleteJob(ctx, &batcherv1.DeleteJobRequest{Id: id})
	notFound("DeleteJob", err)
	w, err := b.WatchJob(ctx, &batcherv1.WatchJobRequest{Id: id})
	if err == nil {
		_, err = w.Recv()
	}
	notFound("WatchJob", err)
	r, err := b.ListJobResults(ctx, &batcherv1.ListJobResultsRequest{Id: id})
	if err == nil {
		_, err = r.Recv()
	}
	notFound("ListJobResults", err)
	if page, err := b.ListJobs(ctx, &batcherv1.ListJobsRequest{}); err != nil || len(page.GetJobs()) != 0 {
		t.Errorf("team-b lists %v, %v", page, err)
	}
	if page, err := a.ListJobs(ctx, &batcherv1.ListJobsRequest{}); err != nil || len(page.GetJobs()) != 1 || page.GetJobs()[0].GetId() != id {
		t.Errorf("team-a lists %v, %v", page, err)
	}
	if _, err := a.GetJob(ctx, &batcherv1.GetJobRequest{Id: id}); err != nil {
		t.Errorf("team-a's own job: %v", err)
	}

	// WatchStats: team-a lacks the admin right; ops has it.
	watch := func(token string) error {
		s, err := batcherv1.NewAdminServiceClient(e.conn(t, token)).WatchStats(ctx, &batcherv1.WatchStatsRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	if err := watch(e.tokA); status.Code(err) != codes.PermissionDenied {
		t.Errorf("WatchStats as team-a = %v, want PERMISSION_DENIED", err)
	}
	if err := watch(""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("WatchStats without a token = %v, want UNAUTHENTICATED", err)
	}
	if err := watch(e.tokAdmin); err != nil {
		t.Errorf("WatchStats as ops: %v", err)
	}
	e.finish(t)
}

// TestTenantIsolationHTTP: the front door and the admin listener serve
// TLS and the same tenants: 401 without a valid token, 403 for a route or
// an admin page the tenant may not use; team-b sees none of team-a's
// files or batches (404, as for unknown ids).
func TestTenantIsolationHTTP(t *testing.T) {
	e := startTenants(t)
	api := "https://" + e.httpAddr + "/v1"
	chat := `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}`
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"not-a-token-of-anyone-at-all", 401}, {e.tokB, 403}, {e.tokA, 200}} {
		code, body := e.do(t, "POST", api+"/chat/completions", tc.token, "application/json", strings.NewReader(chat))
		if code != tc.want {
			t.Errorf("chat with token %.6q: %d %s, want %d", tc.token, code, body, tc.want)
		}
		if code == 401 && strings.Contains(body, "token") {
			t.Errorf("401 says more than it should: %s", body)
		}
	}
	if code, body := e.do(t, "GET", api+"/models", e.tokB, "", nil); code != 200 || strings.Contains(body, "sim-chat") || !strings.Contains(body, "sim-embed") {
		t.Errorf("team-b's models: %d %s", code, body)
	}

	// A file and a batch of team-a's.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	_, _ = io.WriteString(fw, `{"custom_id": "1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "Hi"}]}}`+"\n")
	_ = mw.Close()
	code, body := e.do(t, "POST", api+"/files", e.tokA, mw.FormDataContentType(), &form)
	var file struct{ ID string }
	if code != 200 || json.Unmarshal([]byte(body), &file) != nil || file.ID == "" {
		t.Fatalf("upload: %d %s", code, body)
	}
	batchReq := `{"input_file_id": "` + file.ID + `", "endpoint": "/v1/chat/completions", "completion_window": "24h"}`
	if code, body := e.do(t, "POST", api+"/batches", e.tokB, "application/json", strings.NewReader(batchReq)); code != 404 {
		t.Errorf("team-b batches team-a's file: %d %s, want 404", code, body)
	}
	code, body = e.do(t, "POST", api+"/batches", e.tokA, "application/json", strings.NewReader(batchReq))
	var batch struct{ ID string }
	if code != 200 || json.Unmarshal([]byte(body), &batch) != nil || batch.ID == "" {
		t.Fatalf("create batch: %d %s", code, body)
	}
	for _, p := range []struct{ method, path string }{
		{"GET", "/files/" + file.ID}, {"GET", "/files/" + file.ID + "/content"}, {"DELETE", "/files/" + file.ID},
		{"GET", "/batches/" + batch.ID}, {"POST", "/batches/" + batch.ID + "/cancel"},
	} {
		if code, body := e.do(t, p.method, api+p.path, e.tokB, "", nil); code != 404 {
			t.Errorf("team-b %s %s: %d %s, want 404", p.method, p.path, code, body)
		}
	}
	if code, body := e.do(t, "GET", api+"/files", e.tokB, "", nil); code != 200 || strings.Contains(body, file.ID) {
		t.Errorf("team-b lists files: %d %s", code, body)
	}
	if code, body := e.do(t, "GET", api+"/files?purpose=batch", e.tokA, "", nil); code != 200 || !strings.Contains(body, file.ID) {
		t.Errorf("team-a lists files: %d %s", code, body)
	}
	if code, body := e.do(t, "GET", api+"/batches", e.tokB, "", nil); code != 200 || strings.Contains(body, batch.ID) {
		t.Errorf("team-b lists batches: %d %s", code, body)
	}
	if code, body := e.do(t, "GET", api+"/batches", e.tokA, "", nil); code != 200 || !strings.Contains(body, batch.ID) {
		t.Errorf("team-a lists batches: %d %s", code, body)
	}
	if code, _ := e.do(t, "GET", api+"/files/"+file.ID, e.tokA, "", nil); code != 200 {
		t.Errorf("team-a's own file: %d", code)
	}

	// The admin listener: /healthz for probes; the rest for admins only,
	// /metrics included.
	admin := "https://" + e.adminAddr
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/metrics", "", 401}, {"/metrics", e.tokA, 403}, {"/metrics", e.tokAdmin, 200},
		{"/", "", 401}, {"/", e.tokB, 403}, {"/", e.tokAdmin, 200},
		{"/api/snapshot", e.tokA, 403}, {"/api/snapshot", e.tokAdmin, 200},
	} {
		if code, body := e.do(t, "GET", admin+tc.path, tc.token, "", nil); code != tc.want {
			t.Errorf("admin %s with token %.6q: %d, want %d (%.200s)", tc.path, tc.token, code, tc.want, body)
		}
	}
	e.finish(t)
}

// TestTenantJobsQuota: team-a's quota of 2 jobs not ended refuses a third
// with RESOURCE_EXHAUSTED, a RetryInfo and the quota named (429 with
// Retry-After on the front door).
func TestTenantJobsQuota(t *testing.T) {
	e := startTenants(t, "--drain-timeout=1s", "--config", writeConfig(t, `backends:
  - {name: slow, type: sim, sim: {base_latency: 1h}}
routes:
  - {name: slow-chat, operation: chat, backend: slow}
`))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a := batcherv1.NewJobServiceClient(e.conn(t, e.tokA))
	create := func() error {
		st, err := a.CreateJob(ctx)
		if err != nil {
			return err
		}
		_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{Model: "slow-chat"}}})
		_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: &batcherv1.JobItems{Requests: []*batcherv1.Request{
			{Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: []*batcherv1.ChatMessage{{Role: "user", Content: "hi"}}}}}}}}})
		_, err = st.CloseAndRecv()
		return err
	}
	for i := range 2 {
		if err := create(); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	err := create()
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "jobs not ended") {
		t.Fatalf("a third job = %v", err)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	_, _ = io.WriteString(fw, `{"custom_id": "1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "slow-chat", "messages": [{"role": "user", "content": "Hi"}]}}`+"\n")
	_ = mw.Close()
	_, body := e.do(t, "POST", "https://"+e.httpAddr+"/v1/files", e.tokA, mw.FormDataContentType(), &form)
	var file struct{ ID string }
	_ = json.Unmarshal([]byte(body), &file)
	code, body := e.do(t, "POST", "https://"+e.httpAddr+"/v1/batches", e.tokA, "application/json",
		strings.NewReader(`{"input_file_id": "`+file.ID+`", "endpoint": "/v1/chat/completions", "completion_window": "24h"}`))
	if code != 429 || !strings.Contains(body, "jobs_quota") {
		t.Fatalf("a third job as a batch: %d %s, want 429 jobs_quota", code, body)
	}
	cancel()
	e.finish(t)
}
