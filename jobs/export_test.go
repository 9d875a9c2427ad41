package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// ShutdownForTest shuts m down and then core, which m's items run on (the
// other order would fail the items m still runs), within 30 s, failing
// the test on either's error. It is here, in package jobs, so that the
// internal tests and those of jobs_test share it.
func ShutdownForTest(t testing.TB, m *Manager, core *batcher.Batcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Errorf("manager shutdown: %v", err)
	}
	if err := core.Shutdown(ctx); err != nil {
		t.Errorf("core shutdown: %v", err)
	}
}
