package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/security"
)

// TestEveryDoorRefusesOverQuota: a tenant over one of its quotas is
// refused at every door alike, RESOURCE_EXHAUSTED or 429 with OpenAI's
// rate_limit_error, the message naming the tenant and the quota: the
// core's rpm quota at Submit, SubmitStream and the front door (all three
// share the tenant's one request a minute), the jobs quota at CreateJob
// and /v1/batches.
func TestEveryDoorRefusesOverQuota(t *testing.T) {
	tok := newToken()
	tenants := filepath.Join(t.TempDir(), "quota-tenants.yaml")
	if err := os.WriteFile(tenants, fmt.Appendf(nil, "tenants:\n  - name: team-q\n    tokens: [%s]\n    quotas: {rpm: 1, jobs: 1}\n",
		security.HashToken(tok)), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startTenants(t, "--drain-timeout=1s", "--tenants", tenants)
	if r := e.submit(t, tok, chatItem("sim-chat")); r.err != nil {
		t.Fatalf("the first request, within the quota: %v", r.err)
	}
	if r := e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-chat"}, items(chatItem(""))); r.err != nil {
		t.Fatalf("the first job, within the quota: %v", r.err)
	}
	chat := `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]}`
	for _, door := range []struct {
		name  string
		call  func() refusal
		quota string // as the message names it
		code  string // the HTTP error's code
	}{
		{"Submit", func() refusal { return e.submit(t, tok, chatItem("sim-chat")) }, "quota rpm exceeded: limit 1 request a minute", ""},
		{"SubmitStream", func() refusal { return e.stream(t, tok, chatItem("sim-chat")) }, "quota rpm exceeded: limit 1 request a minute", ""},
		{"front door", func() refusal { return e.post(t, tok, "/v1/chat/completions", chat, "") }, "quota rpm exceeded: limit 1 request a minute", "quota_exceeded"},
		{"jobs", func() refusal { return e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-chat"}, items(chatItem(""))) }, "quota jobs exceeded: limit 1 job not ended at once", ""},
		{"/v1/batches", func() refusal {
			return e.batch(t, tok, "/v1/chat/completions", batchLine("a", "/v1/chat/completions", chat))
		}, "quota jobs exceeded: limit 1 job not ended at once", "jobs_quota"},
	} {
		t.Run(door.name, func(t *testing.T) {
			r := door.call()
			want := `tenant "team-q": ` + door.quota
			if door.code == "" {
				if s := status.Convert(r.err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), want) {
					t.Errorf("got %v, want RESOURCE_EXHAUSTED naming %s", r.err, want)
				}
				return
			}
			var body struct {
				Error struct {
					Message, Type string
					Code          *string
				}
			}
			if err := json.Unmarshal([]byte(r.body), &body); err != nil || r.code != http.StatusTooManyRequests || body.Error.Type != "rate_limit_error" ||
				body.Error.Code == nil || *body.Error.Code != door.code || !strings.Contains(body.Error.Message, want) {
				t.Errorf("got %d %s, want 429 rate_limit_error %s naming %s", r.code, r.body, door.code, want)
			}
		})
	}
	e.finish(t)
}
