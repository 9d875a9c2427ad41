package main

import (
	"strings"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// stats shows a job's counts as batcherctl jobs names them, its cost and
// saving, a backend's batch-API traffic apart from its online calls, and a
// backend without an RPM or TPM budget as unlimited, not as a limit of 0,
// and a lane's queue by name of priority; a job's id, name and state are
// columns, as in batcherctl jobs list.
func TestWriteStatsShowsCostAndBatchAPI(t *testing.T) {
	s := &batcherv1.StatsSnapshot{
		Lanes: []*batcherv1.LaneStats{{Name: "chat/sim", Route: "chat", Backend: "sim", QueuedHigh: 1, QueuedNormal: 2, QueuedDeferrable: 4, InFlight: 3}},
		Backends: []*batcherv1.BackendStats{{Name: "sim", Calls: 5, Requests: 5, BatchApiBatches: 3, BatchApiRequests: 300},
			{Name: "spare"}, {Name: "live", Streaming: 2, Streamed: 9},
			{Name: "capped", InFlight: 1, ConcurrencyLimit: 4, RpmUsed: 9, RpmLimit: 60, TpmUsed: 1200, TpmLimit: 90000}},
		Jobs: []*batcherv1.JobStats{{Id: "j1", Name: "nightly", State: "running", Total: 300, Done: 240, Succeeded: 240, Failed: 12,
			CostUsd: 1.5, SavingUsd: 1.25}, {Id: "j2", Name: "old", State: "cancelled", Total: 100, Done: 60, Succeeded: 60, Failed: 40,
			Cancelled: 30, Expired: 4}, {Id: "j3", State: "completed", Total: 1, Done: 1, Succeeded: 1}},
	}
	var b strings.Builder
	writeStats(&b, s)
	out := b.String()
	for _, want := range []string{
		"chat/sim\troute=chat backend=sim queued=7 (urgent=0 high=1 normal=2 low=0 deferrable=4) in_flight=3\n",
		"calls=5 requests=5 rate_limited=0 retries=0 batch_api_batches=3 batch_api_requests=300\n",
		"spare\tbreaker= in_flight=0/0 rpm=0/unlimited tpm=0/unlimited calls=0 requests=0 rate_limited=0 retries=0\n",
		"j1\tnightly\trunning 252/300 done, 240 succeeded, 12 failed, 0.0 items/s, eta 0s, cost $1.5000, saved $1.2500\n",
		"j2\told\tcancelled 100/100 done, 60 succeeded, 6 failed, 30 cancelled, 4 expired, 0.0 items/s, eta 0s\n",
		"j3\t\tcompleted 1/1 done, 1 succeeded, 0 failed", // no name: an empty column
		"live\tbreaker= in_flight=0/0 rpm=0/unlimited tpm=0/unlimited calls=0 requests=0 rate_limited=0 retries=0 streaming=2 streamed=9\n",
		"capped\tbreaker= in_flight=1/4 rpm=9/60 tpm=1200/90000 calls=0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lack %q:\n%s", want, out)
		}
	}
}
