package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/internal/race"
)

// chunkSeeds are chunks as OpenAI, llmsim and other servers send them, and
// some that decodeChunk must leave to json.Unmarshal.
var chunkSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"sim-chat","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	`{"id":"c","object":"text_completion","created":1,"model":"sim","choices":[{"index":0,"text":"word ","finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"refusal":"I can't"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a \"quoted\" \u00e9 line\n"}}]}`,
	`{"choices":[{"index":1,"delta":{"content":"x"}},{"index":0,"delta":{"content":"y"}}]}`,
	`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":""}}]}}]}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`{"Choices":[{"index":0,"delta":{"content":"x"}}]}`,
	`{"choices":[{"INDEX":2,"delta":{"content":"x"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x","content":"y"}}]}`,
	`{"choices":null,"x":[1,2.5e-3,{"a":[true,false,null]}],"y":"\ud83d\ude00"}`,
	`{"choices":[{"index":0.0,"delta":{"content":"x"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"caf` + "\xe9" + `"}}]}`,
	` { "choices" : [ { "index" : 0 , "delta" : { "content" : "sp" } } ] } `,
	`{"choices":[{"index":0,"delta":{"content":"x"}}]} trailing`,
	`{"choices":[{"index":0,"delta":{"content":"bro`,
	`null`,
	`{"a":"\x"}`,
	`{"a":01}`,
	`{"ſtuff":1,"choices":[]}`,
	`{"choices":[]}`,
	usageWithDetails,
	`{"choices":[],"usage":{"prompt_tokens":5.0,"completion_tokens":7}}`,
	`{"choices":[],"usage":{"Prompt_Tokens":5,"completion_tokens":7}}`,
	`{"choices":[],"usage":{"prompt_tokens":5,"prompt_tokens":6}}`,
	`{"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":-3}}`,
	`{"choices":[],"usage":{"prompt_tokens":12345678901,"completion_tokens":1}}`,
	`{"choices":[],"usage":[]}`,
}

// usageWithDetails is OpenAI's last chunk with include_usage.
const usageWithDetails = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`

// FuzzDecodeChunk holds decodeChunk to json.Unmarshal: where it decodes a
// chunk, json.Unmarshal decodes the same chunk without error into the same
// value.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast streamChunk
		if !decodeChunk(data, &fast, new(chunkArena)) {
			return
		}
		var want streamChunk
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("decodeChunk took %q, which json.Unmarshal refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("decodeChunk(%q) = %s, json.Unmarshal %s", data, dumpChunk(fast), dumpChunk(want))
		}
	})
}

func dumpChunk(ch streamChunk) string {
	b, _ := json.Marshal(ch)
	return string(b)
}

// TestDecodeChunkTakesTheCommonShapes: the chunks a stream is made of
// (text, refusal and completion deltas, the role chunk, the finish chunk,
// null usage, escapes, the usage chunk) are read by decodeChunk, not
// json.Unmarshal.
func TestDecodeChunkTakesTheCommonShapes(t *testing.T) {
	for _, s := range append(chunkSeeds[:8:8], usageWithDetails) {
		var ch streamChunk
		if !decodeChunk([]byte(s), &ch, nil) {
			t.Errorf("decodeChunk left %s to json.Unmarshal", s)
		}
	}
	for _, s := range chunkSeeds[8:] {
		var ch streamChunk
		var want streamChunk
		if decodeChunk([]byte(s), &ch, nil) && (json.Unmarshal([]byte(s), &want) != nil || !reflect.DeepEqual(ch, want)) {
			t.Errorf("decodeChunk read %s unlike json.Unmarshal", s)
		}
	}
	var ch streamChunk
	var r chunkReader
	if err := r.decode([]byte(chunkSeeds[0]), &ch); err != nil || len(ch.Choices) != 1 || *ch.Choices[0].Delta.Content != "Hello" {
		t.Fatalf("decode: %+v, %v", ch, err)
	}
	if err := r.decode([]byte(chunkSeeds[8]), &ch); err != nil || len(ch.Choices[0].Delta.ToolCalls) != 1 || ch.Choices[0].Delta.Content != nil {
		t.Fatalf("decode of a tool call: %+v, %v", ch, err)
	}
}

// BenchmarkDecodeChunk compares decodeChunk with json.Unmarshal on a
// typical text chunk.
func BenchmarkDecodeChunk(b *testing.B) {
	data := []byte(chunkSeeds[0])
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		var r chunkReader
		var ch streamChunk
		for b.Loop() {
			if err := r.decode(data, &ch); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A chunk with an escape, as most answers have some ("\n").
	escaped := []byte(strings.Replace(chunkSeeds[0], `"Hello"`, `"\n\nHello"`, 1))
	b.Run("fast-escaped", func(b *testing.B) {
		b.ReportAllocs()
		var r chunkReader
		var ch streamChunk
		for b.Loop() {
			if err := r.decode(escaped, &ch); err != nil || *ch.Choices[0].Delta.Content != "\n\nHello" {
				b.Fatal(ch, err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var ch streamChunk
			if err := json.Unmarshal(data, &ch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeChunkArena: one arena serves chunk after chunk, as a stream
// reuses it, and each chunk reads as it does without an arena, with more
// strings than the arena holds (three choices) boxed on the heap; a text
// delta then costs one allocation, its text.
func TestDecodeChunkArena(t *testing.T) {
	seeds := append(chunkSeeds[:len(chunkSeeds):len(chunkSeeds)],
		`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"},{"index":1,"delta":{"content":"b","refusal":"c"},"finish_reason":"length"},{"index":2,"text":"d","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	var ar chunkArena
	for range 2 {
		for _, s := range seeds {
			var got, want streamChunk
			okGot := decodeChunk([]byte(s), &got, &ar)
			okWant := decodeChunk([]byte(s), &want, nil)
			if okGot != okWant || okGot && !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: with the arena %v %s, without %v %s", s, okGot, dumpChunk(got), okWant, dumpChunk(want))
			}
		}
	}
	if race.Enabled {
		return // the race detector's allocations are not the code's
	}
	data := []byte(chunkSeeds[0])
	var ch streamChunk
	if n := testing.AllocsPerRun(100, func() { ch = streamChunk{}; decodeChunk(data, &ch, &ar) }); n > 1 {
		t.Fatalf("a text delta costs %v allocations, want 1", n)
	}
}
