package main

import (
	"encoding/json"
	"strconv"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestResultLineHasItemZero: protobuf JSON leaves out zero values, which
// left the first input's line (item 0) and every first run (run 0)
// without the index a reader keys results on. A results line always has
// both, and still reads back as the JobResult it was.
func TestResultLineHasItemZero(t *testing.T) {
	for _, r := range []*batcherv1.JobResult{
		{Item: 0, CustomId: "req-0", Run: 0, Outcome: batcherv1.ItemOutcome_ITEM_OUTCOME_SUCCEEDED, Completion: &batcherv1.Completion{Id: "a"}},
		{Item: 0, CustomId: "req-0", Group: "hot", Run: 2, Outcome: batcherv1.ItemOutcome_ITEM_OUTCOME_FAILED},
		{Item: 7, CustomId: "req-7", Run: 0, Outcome: batcherv1.ItemOutcome_ITEM_OUTCOME_SUCCEEDED},
		{Item: 7, CustomId: "req-7", Run: 1, Outcome: batcherv1.ItemOutcome_ITEM_OUTCOME_SUCCEEDED},
		{},
	} {
		b, err := resultJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		var keys struct {
			Item *string `json:"item"` // protobuf JSON writes an int64 as a string
			Run  *int32  `json:"run"`
		}
		if err := json.Unmarshal(b, &keys); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if keys.Item == nil || *keys.Item != strconv.FormatInt(r.Item, 10) {
			t.Errorf("%s: item %v, want %d", b, keys.Item, r.Item)
		}
		if keys.Run == nil || *keys.Run != r.Run {
			t.Errorf("%s: run %v, want %d", b, keys.Run, r.Run)
		}
		var back batcherv1.JobResult
		if err := protojson.Unmarshal(b, &back); err != nil || !proto.Equal(&back, r) {
			t.Errorf("%s reads back as %v (%v), want %v", b, &back, err, r)
		}
	}
}
