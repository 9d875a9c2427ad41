package openai_test

import (
	"testing"

	"github.com/batcherhq/batcher/backend/backendtest"
	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
)

// TestContract runs the backend contract (package backendtest) against
// llmsim's /v1/chat/completions.
func TestContract(t *testing.T) {
	backendtest.Run(t, backendtest.Target{
		New: func(t testing.TB, baseURL string) batcher.Backend {
			return newBackend(t, openai.Config{BaseURL: baseURL + "/v1"})
		},
		JSON:             true,
		StreamsToolCalls: true,
	})
}
