package jobs_test

import (
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

// TestBatchAPIResultsCarryBatchSize: an item answered through a provider's
// batch API records the upstream batch it came in and that batch's size,
// as an item answered online records its batch's (6e6e716): the results
// once carried the batch id alone, size 0.
func TestBatchAPIResultsCarryBatchSize(t *testing.T) {
	e := newBatchEnv(t, openSQLite, llmsim.Config{BatchTime: 20 * time.Millisecond, Seed: 7})
	m, _ := e.manager(t, nil)
	const n = 250
	j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)
	if p := waitJob(t, m, j.ID); p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
		t.Fatalf("ended %s %+v", p.State, p.Counts)
	}
	ts, err := m.Results(t.Context(), j.ID, -1, jobs.ItemPending, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	sizes, per := map[string]int{}, map[string]int{}
	for _, task := range ts {
		rec, err := jobs.DecodeRecord(task.Result)
		if err != nil {
			t.Fatal(err)
		}
		if rec.BatchID == "" || rec.BatchSize < 1 {
			t.Fatalf("%s: batch %q of size %d; want both set", task.CustomID, rec.BatchID, rec.BatchSize)
		}
		if s, ok := sizes[rec.BatchID]; ok && s != rec.BatchSize {
			t.Fatalf("batch %s: sizes %d and %d", rec.BatchID, s, rec.BatchSize)
		}
		sizes[rec.BatchID] = rec.BatchSize
		per[rec.BatchID]++
	}
	if len(ts) != n || len(sizes) < 2 {
		t.Fatalf("%d results in %d upstream batches, want %d in several", len(ts), len(sizes), n)
	}
	// No line failed upstream: each batch answered all it carried.
	for id, s := range sizes {
		if per[id] != s {
			t.Errorf("batch %s: size %d, %d results", id, s, per[id])
		}
	}
}
