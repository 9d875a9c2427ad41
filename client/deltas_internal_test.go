package client

import (
	"strings"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// TestDeltaQueueBound: a caller who never reads finds at most
// MaxQueuedDeltas deltas waiting, the text whole and in order; tool-call
// pieces and the last delta (finish reason, usage) are never folded.
func TestDeltaQueueBound(t *testing.T) {
	q := deltaQueue{notify: make(chan struct{}, 1)}
	var want strings.Builder
	const n = 10 * MaxQueuedDeltas
	for i := range n {
		w := strings.Repeat("w", i%7+1) + " "
		want.WriteString(w)
		q.push(&batcherv1.Delta{Id: "r", Text: w})
		if i == n/2 {
			q.push(&batcherv1.Delta{Id: "r", ToolCalls: []*batcherv1.ToolCallDelta{{Index: 0, Arguments: "{}"}}})
		}
	}
	q.push(&batcherv1.Delta{Id: "r", FinishReason: batcherv1.FinishReason_FINISH_REASON_STOP})
	got := q.take(nil)
	if len(got) > MaxQueuedDeltas+3 {
		t.Fatalf("%d deltas waiting, want at most %d (+ a tool call and the last)", len(got), MaxQueuedDeltas+3)
	}
	var text strings.Builder
	tools := 0
	for _, d := range got {
		text.WriteString(d.GetText())
		tools += len(d.GetToolCalls())
	}
	if text.String() != want.String() || tools != 1 || got[len(got)-1].GetFinishReason() != batcherv1.FinishReason_FINISH_REASON_STOP {
		t.Fatalf("text %d bytes (want %d), %d tool pieces, last %v", text.Len(), want.Len(), tools, got[len(got)-1])
	}
	// Read again: the queue starts over, folding nothing below the bound.
	q.push(&batcherv1.Delta{Id: "r", Text: "a"})
	q.push(&batcherv1.Delta{Id: "r", Text: "b"})
	if got := q.take(nil); len(got) != 2 {
		t.Fatalf("%d deltas after a take, want 2 (no folding below the bound)", len(got))
	}
}
