package batcher

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

func TestDedup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 10, MinBatchSize: 1})
		zero, warm, seed := float32(0), float32(0.8), int64(7)
		mk := func(id string, temp *float32, seed *int64) *Request {
			r := req(id, PriorityNormal)
			r.Input.Prompt = "same prompt"
			r.Params.Temperature, r.Params.Seed = temp, seed
			return r
		}
		lead := submit(t, b, mk("lead", &zero, &seed))
		synctest.Wait() // in flight
		same := submit(t, b, mk("same", &zero, &seed))
		hot1, hot2 := submit(t, b, mk("hot1", &warm, &seed)), submit(t, b, mk("hot2", &warm, &seed))
		optIn := mk("opt-in", &warm, nil)
		optIn.Dedup = DedupOn
		optIn2 := mk("opt-in-2", &warm, nil)
		optIn2.Dedup = DedupOn
		o1, o2 := submit(t, b, optIn), submit(t, b, optIn2)
		close(be.hold)
		synctest.Wait()
		for _, c := range []*Call{lead, same, hot1, hot2, o1, o2} {
			wantOK(t, c)
		}
		if !same.Result().Deduplicated || lead.Result().Deduplicated || !o2.Result().Deduplicated {
			t.Fatal("identical deterministic requests were not merged")
		}
		if hot1.Result().Deduplicated || hot2.Result().Deduplicated {
			t.Fatal("temperature > 0 runs were merged")
		}
		var sent []string
		for _, ids := range be.batchIDs() {
			sent = append(sent, ids...)
		}
		slices.Sort(sent)
		if want := []string{"hot1", "hot2", "lead", "opt-in"}; !slices.Equal(sent, want) {
			t.Fatalf("sent upstream %v, want %v", sent, want)
		}
		if hits := b.Stats()[0].DedupHits; hits != 2 {
			t.Fatalf("dedup hits %d, want 2", hits)
		}
	})
}

func TestDedupLeaderCancelledFollowerGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{Window: time.Second, MinBatchSize: 5})
		r1, r2 := req("lead", PriorityNormal), req("follow", PriorityNormal)
		r1.Dedup, r2.Dedup = DedupOn, DedupOn
		r1.Input.Prompt, r2.Input.Prompt = "same", "same"
		lead, follow := submit(t, b, r1), submit(t, b, r2)
		lead.Cancel()
		wantErr(t, lead, ErrCanceled)
		time.Sleep(time.Second)
		synctest.Wait()
		wantOK(t, follow)
	})
}
