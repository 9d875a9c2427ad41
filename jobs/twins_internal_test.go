package jobs

import (
	"testing"
	"time"
)

// TestOwnedByOther: a batch made before a chunk's create began is the
// chunk's only when no other chunk without a recorded batch was creating
// then. The kill of TestBatchAPIAnthropicResume/created leaves chunk 1's
// batch unrecorded and chunk 2's create begun after it: chunk 2, resumed
// first, must not take chunk 1's batch through the clock allowance.
func TestOwnedByOther(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	chunks := []Chunk{
		{Chunk: 0, CreateStarted: at(0), BatchID: "b0"},
		{Chunk: 1, CreateStarted: at(100)}, // made a batch, not recorded
		{Chunk: 2, CreateStarted: at(200)}, // killed before its call
		{Chunk: 3},                         // no create yet
	}
	for _, tc := range []struct {
		chunk int
		at    time.Time
		want  bool
	}{
		{2, at(150), true},  // chunk 1's window: not chunk 2's
		{2, at(100), true},  // the start itself is chunk 1's
		{2, at(50), false},  // chunk 0's, which recorded its batch
		{2, at(-50), false}, // before any create: the allowance holds
		{1, at(50), false},  // chunk 0 recorded its batch
		{1, at(-50), false}, // before any create
		{3, at(250), true},  // chunk 2's window, unrecorded
		{0, at(-50), false}, // no create began before
	} {
		if got := ownedByOther(chunks, tc.chunk, tc.at); got != tc.want {
			t.Errorf("chunk %d, batch at %v: owned by another %v, want %v", tc.chunk, tc.at.Sub(t0), got, tc.want)
		}
	}
}
