package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

// A job with dispatch batch_api on a route of an anthropic backend runs
// through Anthropic's Message Batches (llmsim's), end to end through
// batcherd: every custom id once, no online call, the cost at the batch
// price, and JobProgress shows the items waiting upstream while they do.
func TestEndToEndAnthropicBatchAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	// llmsim holds each message batch halfway (HoldBatch) until the test
	// has seen JobProgress report the items upstream with the provider's
	// ETA, then lets them end: no processing time to outlast.
	release := make(chan struct{})
	var releaseOnce sync.Once
	hold := func(_ string, _ map[string]string, done int) <-chan struct{} {
		if done == 50 { // halfway through each batch of 100
			return release
		}
		return nil
	}
	sim, err := llmsim.New(llmsim.Config{ReplyTokens: 8, HoldBatch: hold})
	if err != nil {
		t.Fatal(err)
	}
	var online atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/messages" {
			online.Add(1)
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		releaseOnce.Do(func() { close(release) })
		sim.Close()
		srv.Close()
	})
	cfg := filepath.Join(t.TempDir(), "batcherd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `
backends:
  - name: claude
    type: anthropic
    anthropic: {base_url: %s}
routes:
  - name: chat
    operation: chat
    backend: claude
    model: sim-chat
    batch_api: {max_requests: 100, poll_min: 20ms, poll_max: 200ms}
    price: {input_per_mtok: 3, output_per_mtok: 15, batch_discount: 0.5}
`, srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	d := startDaemon(t, buildBatcherd(t), "--config", cfg, "--data-dir", dataDir)
	c := d.client(t)
	const n = 300 // three message batches of 100
	st, err := c.CreateJob(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{
		Name: "anthropic-batch", Model: "chat", Dispatch: "batch_api"}}}); err != nil {
		t.Fatal(err)
	}
	items := &batcherv1.JobItems{}
	for i := range n {
		items.OpenaiLines = append(items.OpenaiLines, &batcherv1.OpenAIBatchLine{Line: fmt.Appendf(nil,
			`{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"item %d"}],"max_tokens":8}}`, i, i)})
	}
	if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: items}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.CloseAndRecv()
	submitted := time.Now()
	if err != nil || resp.GetAccepted() != n {
		t.Fatalf("CreateJob: %v (accepted %d)", err, resp.GetAccepted())
	}
	id := resp.GetJob().GetId()
	// Each batch held with as many requests run as left, the provider's
	// progress says it ends in as long again as it has run: no later than
	// the time since the job was submitted (the timestamps are to the
	// nanosecond; a second for the clocks' reads). A look at a batch
	// before it reached the hold sees fewer run and a later end; the
	// watch waits for a look after it (poll_max 200ms). The job cannot end
	// meanwhile: its batches are held.
	waiting := watchUntil(t, c, id, func(p *batcherv1.JobProgress) bool {
		ue := p.GetUpstreamEta().AsDuration()
		return p.GetUpstreamItems() > 0 && p.GetUpstreamBatches()["in_progress"] == 3 && ue > 0 && ue <= time.Since(submitted)+time.Second || terminal(p)
	})
	if terminal(waiting) {
		t.Fatalf("the job ended before JobProgress showed items upstream with the provider's ETA: %v", waiting)
	}
	// The provider's ETA bounds the job's from below.
	if ue, e := waiting.GetUpstreamEta().AsDuration(), waiting.GetEta().AsDuration(); e < ue {
		t.Errorf("upstream ETA %v, job ETA %v: want the job's no sooner", ue, e)
	}
	releaseOnce.Do(func() { close(release) })
	last := watchUntil(t, c, id, terminal)
	if last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED || last.GetCounts().GetSucceeded() != n {
		t.Fatalf("the job ended %v\n%s", last, d.logs)
	}
	checkResults(t, dataDir, id, n)
	if got := online.Load(); got != 0 {
		t.Errorf("%d online calls to /v1/messages, want 0", got)
	}
	if mb := sim.BatchStats().MessageBatches; mb != 3 {
		t.Errorf("%d message batches, want 3 of at most 100 requests", mb)
	}
	if cost, saving := last.GetCostUsd(), last.GetSavingUsd(); cost <= 0 || saving < cost*0.999 || saving > cost*1.001 {
		t.Errorf("cost %v, saving %v: want half the online price, saved as much", cost, saving)
	}
	if b := last.GetUpstreamBatches(); b["completed"] != 3 || last.GetUpstreamItems() != 0 {
		t.Errorf("upstream at the end: %d items, batches %v; want none waiting, 3 completed", last.GetUpstreamItems(), b)
	}
	res, err := os.ReadFile(filepath.Join(jobs.JobDir(dataDir, id), jobs.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res), `"dispatch":"batch_api"`) {
		t.Errorf("results carry no batch_api dispatch: %.300s", res)
	}
}
