package runfile

import (
	"math"
	"strings"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The fields appendCompletion writes, by message. A field the proto gains
// must be added to the encoder, then here.
var encodedFields = map[protoreflect.FullName][]protoreflect.Name{
	"batcher.v1.Completion": {"id", "text", "embedding", "finish_reason", "usage", "batch_id", "batch_size",
		"attempts", "timings", "error", "backend", "metadata", "deduplicated",
		"message", "choices", // appendCompletion leaves them to protojson
		"partial", "time_to_first_token", "cached"},
	"batcher.v1.Embedding": {"values"},
	"batcher.v1.Usage":     {"prompt_tokens", "completion_tokens", "total_tokens"},
	"batcher.v1.Timings":   {"batch_wait", "queued", "upstream", "total"},
	"google.rpc.Status":    {"code", "message", "details"}, // details: protojson's
}

func TestEncoderKnowsEveryField(t *testing.T) {
	for _, md := range []protoreflect.MessageDescriptor{
		(&batcherv1.Completion{}).ProtoReflect().Descriptor(),
		(&batcherv1.Embedding{}).ProtoReflect().Descriptor(),
		(&batcherv1.Usage{}).ProtoReflect().Descriptor(),
		(&batcherv1.Timings{}).ProtoReflect().Descriptor(),
		(&status.Status{}).ProtoReflect().Descriptor(),
	} {
		known := encodedFields[md.FullName()]
		fields := md.Fields()
		for i := range fields.Len() {
			name := fields.Get(i).Name()
			found := false
			for _, k := range known {
				found = found || k == name
			}
			if !found {
				t.Errorf("%s.%s: appendCompletion does not write it; add it there and to encodedFields", md.FullName(), name)
			}
		}
		if fields.Len() != len(known) {
			t.Errorf("%s has %d fields, encodedFields lists %d", md.FullName(), fields.Len(), len(known))
		}
	}
}

func d(s int64, n int32) *durationpb.Duration { return &durationpb.Duration{Seconds: s, Nanos: n} }

func TestAppendCompletion(t *testing.T) {
	full := &batcherv1.Completion{
		Id: "q1", Output: &batcherv1.Completion_Text{Text: "a \"quoted\"\n\ttext\u0001 <b> é 😀 \\"},
		FinishReason: batcherv1.FinishReason_FINISH_REASON_LENGTH,
		Usage:        &batcherv1.Usage{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8},
		BatchId:      "b1", BatchSize: 10, Attempts: 2,
		Timings:      &batcherv1.Timings{BatchWait: d(0, 100000), Queued: d(1, 0), Upstream: d(-2, -500000000), Total: d(3, 123456789)},
		Error:        &status.Status{Code: 14, Message: "down"},
		Backend:      "sim",
		Metadata:     map[string]string{"b": "2", "a": "1", "": "empty"},
		Deduplicated: true,
		Partial:      true, TimeToFirstToken: d(0, 250000000), Cached: true,
	}
	for _, tc := range []struct {
		name   string
		c      *batcherv1.Completion
		wantOK bool
	}{
		{"full", full, true},
		{"zero", &batcherv1.Completion{}, true},
		{"empty text", &batcherv1.Completion{Output: &batcherv1.Completion_Text{}}, true},
		{"empty messages", &batcherv1.Completion{Usage: &batcherv1.Usage{}, Timings: &batcherv1.Timings{}, Error: &status.Status{}}, true},
		{"embedding", &batcherv1.Completion{Output: &batcherv1.Completion_Embedding{Embedding: &batcherv1.Embedding{Values: []float32{0.1, -2.5e-8, 3e20, 0}}}}, true},
		{"empty embedding", &batcherv1.Completion{Output: &batcherv1.Completion_Embedding{Embedding: &batcherv1.Embedding{}}}, true},
		{"unknown enum", &batcherv1.Completion{FinishReason: 42}, true},
		{"NaN", &batcherv1.Completion{Output: &batcherv1.Completion_Embedding{Embedding: &batcherv1.Embedding{Values: []float32{float32(math.NaN())}}}}, false},
		{"details", &batcherv1.Completion{Error: &status.Status{Details: []*anypb.Any{{TypeUrl: "x/y"}}}}, false},
		{"not UTF-8", &batcherv1.Completion{Id: "\xff"}, false},
		{"duration out of range", &batcherv1.Completion{Timings: &batcherv1.Timings{Total: d(1, -1)}}, false},
		{"message", &batcherv1.Completion{Message: &batcherv1.OutputMessage{Refusal: "no"}}, false},
		{"choices", &batcherv1.Completion{Choices: []*batcherv1.OutputMessage{{}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ok := appendCompletion([]byte("x"), tc.c)
			if ok != tc.wantOK {
				t.Fatalf("ok %v, want %v: %s", ok, tc.wantOK, b)
			}
			if !ok {
				if string(b) != "x" {
					t.Errorf("a failed append left %q", b)
				}
				return
			}
			checkSameAsProtojson(t, tc.c, b[1:])
		})
	}
}

// checkSameAsProtojson: b reads back to c, and protojson's own encoding is
// the same JSON (protojson may add spaces).
func checkSameAsProtojson(t *testing.T, c *batcherv1.Completion, b []byte) {
	t.Helper()
	got := new(batcherv1.Completion)
	if err := protojson.Unmarshal(b, got); err != nil {
		t.Fatalf("protojson cannot read %s: %v", b, err)
	}
	if !proto.Equal(got, c) {
		t.Fatalf("read back %v, want %v (from %s)", got, c, b)
	}
	want, err := protojson.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ReplaceAll(string(want), " ", "") != strings.ReplaceAll(string(b), " ", "") {
		t.Errorf("\n got %s\nwant %s", b, want)
	}
}

// FuzzAppendCompletion: any completion (from protobuf bytes) either
// encodes to JSON that protojson reads back equal, or is left to protojson.
func FuzzAppendCompletion(f *testing.F) {
	for _, c := range []*batcherv1.Completion{
		{Id: "a", Output: &batcherv1.Completion_Text{Text: "hi\n"}, Usage: &batcherv1.Usage{TotalTokens: 3}, Timings: &batcherv1.Timings{Total: d(0, 1500)}},
		{Output: &batcherv1.Completion_Embedding{Embedding: &batcherv1.Embedding{Values: []float32{1, 2}}}, Metadata: map[string]string{"k": "v"}},
		{Error: &status.Status{Code: 3, Message: "bad"}, Deduplicated: true, FinishReason: 2},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := new(batcherv1.Completion)
		if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, c); err != nil {
			return
		}
		b, ok := appendCompletion(nil, c)
		if !ok {
			return
		}
		got := new(batcherv1.Completion)
		if err := protojson.Unmarshal(b, got); err != nil {
			t.Fatalf("protojson cannot read %s: %v", b, err)
		}
		if !proto.Equal(got, c) {
			t.Fatalf("read back %v, want %v (from %s)", got, c, b)
		}
	})
}
