package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/internal/race"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
)

// TestMarshalDelta holds marshalDelta to proto.Marshal's bytes for the
// deltas it writes, and checks that every other message goes to grpc's
// codec.
func TestMarshalDelta(t *testing.T) {
	ok := []*batcherv1.Delta{
		{Id: "r1", Text: "Hello"},
		{Id: "r1", Text: " wörld ✓\n"},
		{Text: "no id"},
		{Id: "r2", Refusal: "I can't"},
		{Id: "r3", Text: "a", Refusal: "b"},
		{Id: "r4", Index: 2, Text: "second choice"},
		{Id: "r5", Index: -1, Text: "negative index"},
		{Id: "r6"},
		{},
		{Id: "r7", Text: string(bytes.Repeat([]byte("x"), 300))}, // a two-byte length
	}
	fallback := []*batcherv1.Delta{
		{Id: "t", ToolCalls: []*batcherv1.ToolCallDelta{{Index: 0, Id: "c", Name: "f", Arguments: "{"}}},
		{Id: "f", FinishReason: batcherv1.FinishReason_FINISH_REASON_STOP},
		{Id: "u", Usage: &batcherv1.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}},
		{Id: "bad", Text: "\xff\xfe"},
	}
	codec := newDecodeCodec()
	check := func(m proto.Message, fast bool) {
		t.Helper()
		want, werr := proto.Marshal(m)
		got, ok := marshalDelta(m)
		if ok != fast {
			t.Fatalf("%v: marshalDelta took it %v, want %v", m, ok, fast)
		}
		if ok && !bytes.Equal(got, want) {
			t.Fatalf("%v: marshalDelta wrote %x, proto.Marshal %x", m, got, want)
		}
		// The codec gives the same bytes (or the same failure) either way.
		bs, err := codec.Marshal(m)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%v: codec error %v, proto.Marshal %v", m, err, werr)
		}
		if err == nil && !bytes.Equal(bs.Materialize(), want) {
			t.Fatalf("%v: codec wrote %x, want %x", m, bs.Materialize(), want)
		}
	}
	for _, d := range ok {
		check(&batcherv1.SubmitStreamedResponse{Kind: &batcherv1.SubmitStreamedResponse_Delta{Delta: d}}, true)
		check(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Delta{Delta: d}}, true)
	}
	for _, d := range fallback {
		check(&batcherv1.SubmitStreamedResponse{Kind: &batcherv1.SubmitStreamedResponse_Delta{Delta: d}}, false)
		check(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Delta{Delta: d}}, false)
	}
	// Unknown fields, and the other kinds and messages, go to grpc's codec.
	unknown := &batcherv1.Delta{Id: "x", Text: "y"}
	unknown.ProtoReflect().SetUnknown([]byte{0x78, 0x01}) // field 15, varint 1
	check(&batcherv1.SubmitStreamedResponse{Kind: &batcherv1.SubmitStreamedResponse_Delta{Delta: unknown}}, false)
	check(&batcherv1.SubmitStreamedResponse{Kind: &batcherv1.SubmitStreamedResponse_Completion{Completion: &batcherv1.Completion{Id: "c"}}}, false)
	check(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: &batcherv1.Completion{Id: "c"}}}, false)
	check(&batcherv1.SubmitStreamedResponse{}, false)
	check(&batcherv1.SubmitResponse{}, false)
	var _ encoding.CodecV2 = codec
}

// BenchmarkMarshalDelta compares the server's codec on a typical text
// delta with grpc's proto codec.
func BenchmarkMarshalDelta(b *testing.B) {
	m := &batcherv1.SubmitStreamedResponse{Kind: &batcherv1.SubmitStreamedResponse_Delta{
		Delta: &batcherv1.Delta{Id: "0d3c9f6e-6a4b-4f41-9a6c-2b7f3c1d9e8a", Text: " token"}}}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"server", newDecodeCodec()}, {"grpc", encoding.GetCodecV2("proto")}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bs, err := c.codec.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		})
	}
}

// TestDeltaMsgWire: a delta of SubmitStreamed or SubmitStream sent as its
// own message (streamedDeltaMsg, streamDeltaMsg) encodes as proto.Marshal
// encodes its response, under the server's codec (into its own memory, a
// delta longer than that included, and a tool-call delta through grpc's
// codec) and under grpc's own proto codec (a server not built by
// NewGRPCServer); a text delta's encoding then costs no allocation.
func TestDeltaMsgWire(t *testing.T) {
	long := strings.Repeat("token ", 40) // past deltaWireBytes
	deltas := []*batcher.Delta{
		{Text: "Hello"},
		{Text: " wörld ✓\n"},
		{Refusal: "I can't"},
		{Text: long},
		{ToolCalls: []batcher.ToolCallDelta{{Index: 0, ID: "call_1", Name: "f", Arguments: `{"a":`}}},
	}
	// msg returns d's message of each RPC and the response it holds.
	msgs := func(d *batcher.Delta) [][2]any {
		m := new(streamedDeltaMsg)
		fillDelta(&m.d, "srv-r1", d)
		m.k.Delta = &m.d
		m.Kind = &m.k
		n := new(streamDeltaMsg)
		fillDelta(&n.d, "srv-r1", d)
		n.k.Delta = &n.d
		n.Kind = &n.k
		return [][2]any{{m, &m.SubmitStreamedResponse}, {n, &n.SubmitStreamResponse}}
	}
	for _, codec := range []encoding.CodecV2{newDecodeCodec(), encoding.GetCodecV2("proto")} {
		for _, d := range deltas {
			for _, mr := range msgs(d) {
				want, err := proto.Marshal(mr[1].(proto.Message))
				if err != nil {
					t.Fatal(err)
				}
				bs, err := codec.Marshal(mr[0])
				if err != nil {
					t.Fatal(err)
				}
				if got := bs.Materialize(); !bytes.Equal(got, want) {
					t.Fatalf("%T, %T: delta %+v encodes as %x, proto.Marshal %x", codec, mr[0], d, got, want)
				}
			}
		}
	}
	if race.Enabled {
		return // the race detector's allocations are not the code's
	}
	c := newDecodeCodec()
	for _, mr := range msgs(deltas[0]) {
		if n := testing.AllocsPerRun(100, func() { _, _ = c.Marshal(mr[0]) }); n != 0 {
			t.Fatalf("%T: a text delta's encoding costs %v allocations, want 0", mr[0], n)
		}
	}
}
