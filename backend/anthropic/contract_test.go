package anthropic_test

import (
	"testing"

	"github.com/batcherhq/batcher/backend/anthropic"
	"github.com/batcherhq/batcher/backend/backendtest"
	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/batcher"
)

// TestContract runs the backend contract (package backendtest) against
// llmsim's /v1/messages.
func TestContract(t *testing.T) {
	backendtest.Run(t, backendtest.Target{
		New: func(t testing.TB, baseURL string) batcher.Backend {
			return newBackend(t, anthropic.Config{BaseURL: baseURL})
		},
		StreamsToolCalls: true,
	})
}

// TestBatchContract runs the batched contract against llmsim's
// /v1/messages/batches.
func TestBatchContract(t *testing.T) {
	backendtest.RunBatch(t, backendtest.BatchTarget{
		New: func(t testing.TB, baseURL string) batchapi.Upstream {
			return newBackend(t, anthropic.Config{BaseURL: baseURL}).Batches()
		},
	})
}
