package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// batchInput is n chat lines for model, custom ids c-0… c-(n-1).
func batchInput(model string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"c-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"hi %d"}]}}`+"\n", i, model, i)
	}
	return b.String()
}

// waitBatch polls the batch (the Batch API's only way to learn its end)
// until it is terminal, within testTimeout.
func waitBatch(t *testing.T, c openai.Client, id string) *openai.Batch {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := c.Batches.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		switch b.Status {
		case openai.BatchStatusCompleted, openai.BatchStatusFailed, openai.BatchStatusCancelled, openai.BatchStatusExpired:
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s still %s after %v", id, b.Status, testTimeout)
		}
		<-tick.C
	}
}

// TestBatchAPI: with the official SDK, a batch created from an uploaded
// file runs to completion, its output file answers every custom_id once;
// a batch on a slow model is cancelled; batches list and page; an unknown
// id is 404 and a bad endpoint 400 naming the param.
func TestBatchAPI(t *testing.T) {
	cfg := writeConfig(t, `
backends:
  - {name: fast, type: sim}
  - {name: slow, type: sim, max_concurrency: 1, sim: {base_latency: 10m}}
routes:
  - {name: sim-chat, operation: chat, backend: fast}
  - {name: slow-chat, operation: chat, backend: slow, batching: {max_batch_size: 2}}
`)
	_, stop, exit, logs := startInProcess(t, "--config", cfg, "--listen=127.0.0.1:0", "--data-dir", t.TempDir())
	c := sdkClient(httpAddr(t, logs), "")
	ctx := t.Context()

	upload := func(body string) string {
		t.Helper()
		f, err := c.Files.New(ctx, openai.FileNewParams{
			File: openai.File(strings.NewReader(body), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch,
		})
		if err != nil {
			t.Fatalf("upload: %v\n%s", err, logs)
		}
		return f.ID
	}
	const n = 50
	mismatch := `{"custom_id":"wrong-url","method":"POST","url":"/v1/embeddings","body":{"model":"sim-embed","input":"x"}}` + "\n"
	in := upload(batchInput("sim-chat", n) + mismatch)
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: in, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, logs)
	}
	if b.Object != "batch" || b.InputFileID != in || b.Endpoint != "/v1/chat/completions" || b.Metadata["team"] != "a" {
		t.Errorf("created batch: %+v", b)
	}
	done := waitBatch(t, c, b.ID)
	if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Total != n+1 || done.RequestCounts.Completed != n ||
		done.RequestCounts.Failed != 1 || done.OutputFileID == "" || done.ErrorFileID == "" || done.CompletedAt == 0 ||
		done.FinalizingAt == 0 || done.FinalizingAt > done.CompletedAt || done.CancellingAt != 0 {
		t.Fatalf("ended batch: %+v", done)
	}
	errResp, err := c.Files.Content(ctx, done.ErrorFileID)
	if err != nil {
		t.Fatalf("error file content: %v", err)
	}
	errLines, _ := io.ReadAll(errResp.Body)
	_ = errResp.Body.Close()
	if !strings.Contains(string(errLines), `"custom_id":"wrong-url"`) || !strings.Contains(string(errLines), "does not match the batch's endpoint") {
		t.Errorf("error file: %s", errLines)
	}
	resp, err := c.Files.Content(ctx, done.OutputFileID)
	if err != nil {
		t.Fatalf("output content: %v", err)
	}
	seen := map[string]int{}
	requestIDs := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var line struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int    `json:"status_code"`
				RequestID  string `json:"request_id"`
			} `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		if line.Response.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", line.CustomID, line.Response.StatusCode)
		}
		seen[line.CustomID]++
		if rid := line.Response.RequestID; rid == "" || rid == b.ID || requestIDs[rid] {
			t.Errorf("%s: request_id %q, want one of its own", line.CustomID, rid)
		}
		requestIDs[line.Response.RequestID] = true
	}
	_ = resp.Body.Close()
	for i := range n {
		if id := fmt.Sprintf("c-%d", i); seen[id] != 1 {
			t.Errorf("%s answered %d times", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Errorf("output holds %d custom ids, want %d", len(seen), n)
	}

	// Cancel a batch on the slow model (10 min a call): it cannot have
	// completed, however slow the machine.
	slow, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: upload(batchInput("slow-chat", 20)),
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatalf("create slow: %v", err)
	}
	cb, err := c.Batches.Cancel(ctx, slow.ID)
	if err != nil || (cb.Status != openai.BatchStatusCancelling && cb.Status != openai.BatchStatusCancelled) {
		t.Fatalf("cancel: %+v, %v", cb, err)
	}
	ended := waitBatch(t, c, slow.ID)
	if ended.Status != openai.BatchStatusCancelled || ended.CancelledAt == 0 || ended.RequestCounts.Completed >= 20 ||
		ended.CancellingAt == 0 || ended.CancellingAt > ended.CancelledAt {
		t.Errorf("cancelled batch: %+v", ended)
	}
	// An ended batch cannot be cancelled, as OpenAI answers.
	for _, e := range []struct{ id, status string }{{b.ID, "completed"}, {slow.ID, "cancelled"}} {
		var apiErr *openai.Error
		_, err := c.Batches.Cancel(ctx, e.id)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Type != "invalid_request_error" ||
			apiErr.Message != "Cannot cancel a batch with status '"+e.status+"'" {
			t.Errorf("cancel %s batch: %v, want 400", e.status, err)
		}
	}

	// List: newest first, paged with after and limit.
	page, err := c.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(1)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != slow.ID || !page.HasMore {
		t.Fatalf("list page 1: %+v, %v", page, err)
	}
	page, err = c.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(1), After: openai.String(slow.ID)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != b.ID || page.HasMore {
		t.Fatalf("list page 2: %+v, %v", page, err)
	}

	var apiErr *openai.Error
	if _, err := c.Batches.Get(ctx, "job_unknown"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("unknown batch: %v, want 404", err)
	}
	if _, err := c.Batches.Cancel(ctx, "job_unknown"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("cancel unknown batch: %v, want 404", err)
	}
	_, err = c.Batches.New(ctx, openai.BatchNewParams{InputFileID: in, Endpoint: "/v1/images", CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "endpoint" {
		t.Errorf("bad endpoint: %v, want 400 naming endpoint", err)
	}
	// A custom_id used twice is refused, naming the line, as OpenAI does.
	_, err = c.Batches.New(ctx, openai.BatchNewParams{InputFileID: upload(batchInput("sim-chat", 3) + batchInput("sim-chat", 1)),
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(apiErr.Message, `line 4: custom_id "c-0" is already used by line 1`) {
		t.Errorf("duplicate custom_id: %v, want 400 naming lines 4 and 1", err)
	}
	_, err = c.Batches.New(ctx, openai.BatchNewParams{InputFileID: "file-000000000000000000000000", Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Param != "input_file_id" {
		t.Errorf("unknown input file: %v, want 404 naming input_file_id", err)
	}

	stop()
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d:\n%s", code, logs)
	}
}
