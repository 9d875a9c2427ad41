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
		{name: "too many", md: many, wantErr: "spec.metadata: must hold at most 32 entries, got 33"},
		{name: "long key", md: map[string]string{strings.Repeat("k", 65): "v"}, wantErr: "spec.metadata: key \"kkk"},
		{name: "empty key", md: map[string]string{"": "v"}, wantErr: `spec.metadata: key "": keys must be 1 to 64 bytes, got 0`},
		{name: "long value", md: map[string]string{"team": strings.Repeat("v", 2000)}, wantErr: `spec.metadata[team]: must be at most 512 bytes, got 2000`},
		{name: "reserved", md: map[string]string{"team": "a", "batcher.x": "v", "batcher.openai.endpoint": "/v1/embeddings"},
			wantErr: `spec.metadata: key "batcher.openai.endpoint": keys beginning with "batcher." are reserved for Batcher's own`},
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

// A door's own tags are added to the checked metadata, not held to the
// reserved prefix; a tag outside it is refused.
func TestSpecTagsAdded(t *testing.T) {
	e := newEnv(t, nil)
	c, err := e.m.Begin(t.Context(), jobs.Spec{Model: "chat", Metadata: map[string]string{"team": "a"},
		Tags: map[string]string{"batcher.openai.endpoint": "/v1/chat/completions"}})
	if err != nil {
		t.Fatal(err)
	}
	md := c.Job().Spec.Metadata
	c.Abort()
	if len(md) != 2 || md["team"] != "a" || md["batcher.openai.endpoint"] != "/v1/chat/completions" {
		t.Errorf("metadata %v, want the caller's key and the tag", md)
	}
	_, err = e.m.Begin(t.Context(), jobs.Spec{Model: "chat", Tags: map[string]string{"team": "a"}})
	if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), `spec.tags: key "team": must begin with "batcher."`) {
		t.Errorf("error %v, want spec.tags refused", err)
	}
}
