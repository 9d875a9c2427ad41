package openai_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// Every upstream HTTP call counts as one call in the core's metrics,
// whatever the route's mode: a fan-out's calls one by one with their own
// outcome (a failed one names its error type), a packed route's per pack.
func TestEachUpstreamCallCounts(t *testing.T) {
	sim, err := llmsim.New(llmsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The upstream refuses any call that mentions "refuse".
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("refuse")) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error": {"message": "refused", "type": "invalid_request_error"}}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		sim.Close()
		ts.Close()
	})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	be := newBackend(t, openai.Config{BaseURL: ts.URL + "/v1", Pack: openai.PackConfig{Enabled: true, MaxItems: 4, Routes: []string{"packed"}}})
	core := newCore(t, []batcher.BackendConfig{{Name: "up", Backend: be}}, []batcher.Route{
		{Name: "fanout", Op: batcher.OpChat, Backend: "up", Model: "sim-chat", Batch: fullBatch(8)},
		{Name: "packed", Op: batcher.OpChat, Backend: "up", Model: "sim-chat", Batch: fullBatch(8), DefaultMaxTokens: 64},
	}, batcher.WithMeterProvider(mp))

	reqs := make([]*batcher.Request, 8)
	for i := range reqs {
		reqs[i] = chat("fanout", fmt.Sprintf("Question %d?", i))
	}
	reqs[3] = chat("fanout", "Please refuse this one.")
	for i, res := range doAll(t, core, reqs) {
		if (res.Err != nil) != (i == 3) {
			t.Fatalf("fan-out request %d: %v", i, res.Err)
		}
	}
	calls, saved := upstreamCalls(t, reader)
	if calls["ok"] != 8-1 || calls["invalid_request"] != 1 || len(calls) != 2 {
		t.Errorf("fan-out of 8 with one refused: batcher.upstream.calls by outcome %v, want 7 ok and 1 invalid_request", calls)
	}
	if saved != 0 {
		t.Errorf("fan-out: batcher.upstream.calls_saved = %d, want 0", saved)
	}

	for i := range reqs {
		reqs[i] = chat("packed", fmt.Sprintf("Short question %d?", i), "Answer in one line.")
	}
	for i, res := range doAll(t, core, reqs) {
		if res.Err != nil {
			t.Fatalf("packed request %d: %v", i, res.Err)
		}
	}
	calls, saved = upstreamCalls(t, reader)
	if calls["ok"] != 7+2 {
		t.Errorf("8 packed by 4: batcher.upstream.calls{ok} = %d, want 7 (the fan-out's) + 2 packs", calls["ok"])
	}
	if saved != 8-2 {
		t.Errorf("8 packed by 4: batcher.upstream.calls_saved = %d, want 6", saved)
	}
}

// upstreamCalls reads batcher.upstream.calls by outcome and
// batcher.upstream.calls_saved.
func upstreamCalls(t *testing.T, reader sdkmetric.Reader) (map[string]int64, int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	var saved int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				switch m.Name {
				case "batcher.upstream.calls":
					o, _ := p.Attributes.Value("batcher.outcome")
					calls[o.AsString()] += p.Value
				case "batcher.upstream.calls_saved":
					saved += p.Value
				}
			}
		}
	}
	return calls, saved
}
