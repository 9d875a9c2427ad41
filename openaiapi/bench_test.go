package openaiapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// benchServe sends body to path through the handler in process (no client
// and no network), many callers at once.
func benchServe(b *testing.B, e *env, path, body string) {
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := http.NewRequestWithContext(b.Context(), http.MethodPost, path, strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			r.Header.Set("Authorization", "Bearer "+testToken)
			w := httptest.NewRecorder()
			e.handler.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Errorf("%d: %s", w.Code, w.Body)
				return
			}
		}
	})
}

var benchBatch = batcher.BatchConfig{Window: 200 * time.Microsecond, MaxBatchSize: 32}

// BenchmarkChat: one chat call through the handler and the core to an
// instant backend.
func BenchmarkChat(b *testing.B) {
	e := newEnv(b, newFake(), withBatch(benchBatch), withCore(batcher.WithQueueCapacity(1<<20)))
	benchServe(b, e, "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":16}`)
}

// BenchmarkEmbeddingsArray: one call of 100 inputs, split and reassembled.
func BenchmarkEmbeddingsArray(b *testing.B) {
	e := newEnv(b, newFake(), withBatch(batcher.BatchConfig{Window: 200 * time.Microsecond, MaxBatchSize: 100}),
		withCore(batcher.WithQueueCapacity(1<<20)))
	inputs := make([]string, 100)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("%q", fmt.Sprint("input ", i))
	}
	benchServe(b, e, "/v1/embeddings", `{"model":"embed","input":[`+strings.Join(inputs, ",")+`]}`)
}
