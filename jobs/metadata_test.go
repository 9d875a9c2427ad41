package jobs_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// A job's metadata has the bounds of a request's: entries, key and value
// sizes, each refused naming the field and the limit.
func TestSpecMetadataBounded(t *testing.T) {
	e := newEnv(t, nil)
	many := map[string]string{}
	for i := range jobs.MaxSpecMetadata + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, tc := range []struct {
		name    string
		md      map[string]string
		wantErr string // "": accepted
	}{
		{name: "within", md: map[string]string{strings.Repeat("k", batcher.MaxMetadataKeyBytes): strings.Repeat("v", batcher.MaxMetadataValBytes)}},
		{name: "too many", md: many, wantErr: "spec.metadata: at most 32 entries, got 33"},
		{name: "long key", md: map[string]string{strings.Repeat("k", 65): "v"}, wantErr: "spec.metadata: key \"kkk"},
		{name: "long value", md: map[string]string{"team": strings.Repeat("v", 2000)}, wantErr: `spec.metadata["team"]: at most 512 bytes, got 2000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.m.Begin(t.Context(), jobs.Spec{Model: "chat", Metadata: tc.md})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				c.Abort()
				return
			}
			if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tc.wantErr)
			}
		})
	}
}
