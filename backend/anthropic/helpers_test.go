package anthropic_test

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/backend/anthropic"
	"github.com/batcherhq/batcher/llmsim"
)

func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.DiscardHandler))
	goleak.VerifyTestMain(m)
}

// startSim serves an llmsim with cfg on a loopback port until the test
// ends, and returns it and its root URL.
func startSim(t testing.TB, cfg llmsim.Config) (*llmsim.Server, string) {
	t.Helper()
	sim, err := llmsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() {
		sim.Close()
		ts.Close()
	})
	return sim, ts.URL
}

// newBackend returns a backend for cfg, closed when the test ends.
func newBackend(t testing.TB, cfg anthropic.Config) *anthropic.Backend {
	t.Helper()
	be, err := anthropic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	return be
}
