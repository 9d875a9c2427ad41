package batcher_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
)

// CheckMetadata is the one metadata rule: entries up to the door's bound,
// keys of 1 to 64 bytes, values up to 512, the least bad key named.
func TestCheckMetadata(t *testing.T) {
	many := map[string]string{}
	for i := range 17 {
		many[fmt.Sprint("k", i)] = "v"
	}
	long := strings.Repeat("k", batcher.MaxMetadataKeyBytes+1)
	for _, tc := range []struct {
		name  string
		md    map[string]string
		max   int
		field string // "": accepted
		why   string
	}{
		{"nil", nil, 16, "", ""},
		{"at the bounds", map[string]string{strings.Repeat("k", 64): strings.Repeat("v", 512)}, 1, "", ""},
		{"entries", many, 16, "metadata", "must hold at most 16 entries, got 17"},
		{"entries within the request bound", many, batcher.MaxMetadataEntries, "", ""},
		{"empty key", map[string]string{"": "v"}, 16, "metadata", `key "": keys must be 1 to 64 bytes, got 0`},
		{"long key", map[string]string{long: "v"}, 16, "metadata", "keys must be 1 to 64 bytes, got 65"},
		{"long value", map[string]string{"team": strings.Repeat("v", 513)}, 16, "metadata[team]", "must be at most 512 bytes, got 513"},
		{"least bad key named", map[string]string{"b": strings.Repeat("v", 513), "a": strings.Repeat("v", 600), "c": "ok"}, 16, "metadata[a]", "got 600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ve := batcher.CheckMetadata("metadata", tc.md, tc.max)
			if tc.field == "" {
				if ve != nil {
					t.Fatalf("refused: %v", ve)
				}
				return
			}
			if ve == nil || ve.Field != tc.field || !strings.Contains(ve.Reason, tc.why) || !errors.Is(ve, batcher.ErrInvalid) {
				t.Fatalf("got %v, want %s: ...%s", ve, tc.field, tc.why)
			}
		})
	}
}
