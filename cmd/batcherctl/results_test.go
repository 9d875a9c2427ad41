package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
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
		var buf bytes.Buffer
		if err := printJSONLine(&buf, r); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		if bytes.Count(b, []byte{'\n'}) != 1 {
			t.Errorf("%q: want one line", b)
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

// TestJSONOutputHasZeroCounts: every -o json output (printJSON for get,
// health, stats and submit; printJSONLine for list, watch and results)
// writes a counter that is 0 as 0: a machine reading "failed" finds it.
func TestJSONOutputHasZeroCounts(t *testing.T) {
	job := &batcherv1.Job{Id: "job_1", Progress: &batcherv1.JobProgress{
		State:  batcherv1.JobState_JOB_STATE_COMPLETED,
		Counts: &batcherv1.JobCounts{Total: 5, Succeeded: 5},
		Groups: []*batcherv1.GroupProgress{{Group: "a", Counts: &batcherv1.JobCounts{}}},
	}}
	for name, print := range map[string]func(*bytes.Buffer) error{
		"printJSON":     func(b *bytes.Buffer) error { return printJSON(b, job) },
		"printJSONLine": func(b *bytes.Buffer) error { return printJSONLine(b, job) },
	} {
		var buf bytes.Buffer
		if err := print(&buf); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Progress struct {
				Counts map[string]json.RawMessage `json:"counts"`
				Groups []struct {
					Counts map[string]json.RawMessage `json:"counts"`
				} `json:"groups"`
			} `json:"progress"`
		}
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%s: %s: %v", name, buf.Bytes(), err)
		}
		for _, counts := range []map[string]json.RawMessage{got.Progress.Counts, got.Progress.Groups[0].Counts} {
			for _, k := range []string{"total", "pending", "running", "succeeded", "failed", "cancelled", "expired"} {
				if v, ok := counts[k]; !ok || (k != "total" && k != "succeeded" && string(v) != `"0"`) {
					t.Errorf("%s: counts %s is %s, want \"0\" (%s)", name, k, v, strings.TrimSpace(buf.String()))
				}
			}
		}
	}
}
