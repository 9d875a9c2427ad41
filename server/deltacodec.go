package server

import (
	"slices"
	"unicode/utf8"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A streamed answer sends one Delta message a token, so its encoding is
// paid once a token. grpc's proto codec sizes a message twice (proto.Size,
// then Marshal sizes it again) through the protobuf runtime's reflection
// tables before it writes it; the common delta, an id and a piece of text
// (or refusal), is three fields, which marshalDelta writes straight, sized
// once. Any other delta (tool-call pieces, a finish reason, usage, unknown
// fields, a string that is not valid UTF-8, which proto.Marshal refuses)
// goes to grpc's codec as before. TestMarshalDelta holds the bytes equal to
// proto.Marshal's.

// Marshal encodes v as grpc's proto codec does; a text delta of
// SubmitStreamed or SubmitStream is written by marshalDelta.
func (c *decodeCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch p := v.(type) {
	case *sendProbe:
		return p.marshal()
	case *streamProbe:
		return p.marshal()
	case *streamedDeltaMsg:
		if bs, ok := p.w.marshal(&p.SubmitStreamedResponse); ok {
			return bs, nil
		}
		return c.CodecV2.Marshal(&p.SubmitStreamedResponse)
	case *streamDeltaMsg:
		if bs, ok := p.w.marshal(&p.SubmitStreamResponse); ok {
			return bs, nil
		}
		return c.CodecV2.Marshal(&p.SubmitStreamResponse)
	}
	if b, ok := marshalDelta(v); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// deltaWire is a Delta message's encoding, which the codec writes into the
// message's own memory (streamedDeltaMsg, streamDeltaMsg): the bytes in
// arr (or, for a delta longer than arr, in a slice appendDelta grows), and
// the one-buffer slice gRPC is given, whose buffer is buf, so that no
// interface box is made for it. gRPC frees nothing it need give back: a
// SliceBuffer's Free does nothing, and the collector takes the message
// once gRPC has written it.
type deltaWire struct {
	buf wireBuf
	bs  [1]mem.Buffer
	arr [deltaWireBytes]byte
}

// deltaWireBytes holds a delta of a token or two with its request's id
// (a delta of a token with a server-made id is some 30 bytes); a longer
// one grows a slice of its own.
const deltaWireBytes = 64

// wireBuf is a mem.SliceBuffer a pointer to which is a mem.Buffer.
type wireBuf struct{ mem.SliceBuffer }

// marshal writes m, a delta message, into w and returns it as gRPC takes
// it, or false when appendDelta does not write m (marshalDelta).
func (w *deltaWire) marshal(m proto.Message) (mem.BufferSlice, bool) {
	b, ok := appendDelta(w.arr[:0], m)
	if !ok {
		return nil, false
	}
	w.buf.SliceBuffer = b
	w.bs[0] = &w.buf
	return w.bs[:], true
}

// marshalDelta returns the wire form of v when v is a SubmitStreamedResponse
// or SubmitStreamResponse that holds a delta of text or refusal only, and
// false for anything else.
func marshalDelta(v any) ([]byte, bool) { return appendDelta(nil, v) }

// appendDelta is marshalDelta appending to dst.
func appendDelta(dst []byte, v any) ([]byte, bool) {
	var d *batcherv1.Delta
	var field protowire.Number
	switch m := v.(type) {
	case *batcherv1.SubmitStreamedResponse:
		k, ok := m.Kind.(*batcherv1.SubmitStreamedResponse_Delta)
		if !ok || len(m.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		d, field = k.Delta, 1
	case *batcherv1.SubmitStreamResponse:
		k, ok := m.Kind.(*batcherv1.SubmitStreamResponse_Delta)
		if !ok || len(m.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		d, field = k.Delta, 5
	default:
		return nil, false
	}
	if d == nil || len(d.ToolCalls) > 0 || d.FinishReason != batcherv1.FinishReason_FINISH_REASON_UNSPECIFIED ||
		d.Usage != nil || len(d.ProtoReflect().GetUnknown()) > 0 ||
		!utf8.ValidString(d.Id) || !utf8.ValidString(d.Text) || !utf8.ValidString(d.Refusal) {
		return nil, false
	}
	// Fields in number order, empty ones left out, as proto.Marshal writes
	// them.
	inner := strSize(1, d.Id) + strSize(3, d.Text) + strSize(4, d.Refusal)
	if d.Index != 0 {
		inner += protowire.SizeTag(2) + protowire.SizeVarint(uint64(int64(d.Index)))
	}
	b := slices.Grow(dst, protowire.SizeTag(field)+protowire.SizeBytes(inner))
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	b = appendStr(b, 1, d.Id)
	if d.Index != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(d.Index)))
	}
	b = appendStr(b, 3, d.Text)
	return appendStr(b, 4, d.Refusal), true
}

// strSize is the encoded size of string field n holding s (0 when empty).
func strSize(n protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(n) + protowire.SizeBytes(len(s))
}

// appendStr appends string field n holding s, unless s is empty.
func appendStr(b []byte, n protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}
