package runfile

import (
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

const benchLine = `{"id":"q12345","model":"sim-chat","chat":{"messages":[{"role":"user","content":"prompt number 12345"}]},"params":{"maxTokens":16}}`

var benchCompletion = &batcherv1.Completion{
	Id: "q12345", Output: &batcherv1.Completion_Text{Text: "prompt number 12345 quick seven south inside prompt bright simple six steady"},
	FinishReason: batcherv1.FinishReason_FINISH_REASON_STOP,
	Usage:        &batcherv1.Usage{PromptTokens: 3, CompletionTokens: 16, TotalTokens: 19},
	BatchId:      "b1234", BatchSize: 64, Attempts: 1,
	Timings: &batcherv1.Timings{BatchWait: durationpb.New(2100000), Queued: durationpb.New(2200000),
		Upstream: durationpb.New(2000000), Total: durationpb.New(4300000)},
	Backend: "sim",
}

// BenchmarkParseLine: the fast path against protojson, on the line shape of
// the 100,000-prompt benchmark.
func BenchmarkParseLine(b *testing.B) {
	b.Run("impl=fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseLine(1, []byte(benchLine)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := protojson.Unmarshal([]byte(benchLine), new(batcherv1.Request)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeResult: a result line with the fast encoder against
// protojson's.
func BenchmarkEncodeResult(b *testing.B) {
	var buf []byte
	b.Run("impl=fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = appendResult(buf[:0], 12345, "q12345", benchCompletion, nil)
		}
	})
	b.Run("impl=protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = marshal.MarshalAppend(buf[:0], benchCompletion)
		}
	})
}
