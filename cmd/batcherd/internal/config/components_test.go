package config_test

import (
	"strings"
	"testing"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

// budgetWindowYAML sets a retry budget window the core refuses (under 1s).
const budgetWindowYAML = `backends:
  - name: sim
    type: sim
    retry: {budget_window: 500ms}
routes:
  - {name: a, operation: chat, backend: sim}
  - {name: b, operation: embedding, backend: sim}
  - {name: c, operation: completion, backend: sim}
`

// TestCoreRulesAtLoad: a setting the core refuses fails when the file is
// loaded, under its YAML path, alone: no cascade of routes missing their
// backend.
func TestCoreRulesAtLoad(t *testing.T) {
	_, err := config.Parse([]byte(budgetWindowYAML))
	if err == nil {
		t.Fatal("Parse accepted retry.budget_window: 500ms, which the core refuses")
	}
	const want = "backends[0].retry.budget_window: must be at least 1s, got 500ms"
	if err.Error() != want {
		t.Fatalf("error %q, want exactly %q", err, want)
	}
}

// TestServerOptionsFailAtLoad: a server setting out of range fails at load
// naming its YAML path, as the server itself words it.
func TestServerOptionsFailAtLoad(t *testing.T) {
	_, err := config.Parse([]byte("stream_window: 0\nsummary_interval: 1ms\n"))
	for _, want := range []string{"stream_window: must be at least 1, got 0", "summary_interval: must be 100ms to 1h0m0s, got 1ms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
