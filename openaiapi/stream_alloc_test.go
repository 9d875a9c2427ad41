package openaiapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/internal/race"
)

// TestChunkUsageNullNoAlloc: a chunk's "usage":null costs its encoding no
// allocation over a chunk without the field.
func TestChunkUsageNullNoAlloc(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts are noise under the race detector (sync.Pool drops items)")
	}
	text := "word"
	ch := chatChunk{ID: "r", Object: "chat.completion.chunk", Model: "m", Choices: []chatChunkChoice{{Delta: chunkDelta{Content: &text}}}}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	encode := func() {
		buf.Reset()
		_ = enc.Encode(&ch)
	}
	encode()
	without := testing.AllocsPerRun(100, encode)
	ch.Usage = &nullUsage
	encode()
	if !strings.Contains(buf.String(), `"usage":null`) {
		t.Fatalf("encoded %s, want \"usage\":null", buf.String())
	}
	if with := testing.AllocsPerRun(100, encode); with > without {
		t.Errorf("%v allocations a chunk with usage null, %v without", with, without)
	}
}
