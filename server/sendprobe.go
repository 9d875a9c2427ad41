package server

import (
	"context"
	"sync"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// sendProbe is a SubmitStreamed Delta message that tells its
// streamedSender when gRPC's writer has taken its bytes off the stream's
// queue. The codec (decodeCodec.Marshal) encodes it into a buffer of
// probeBufSize bytes with the probe as its mem.BufferPool: gRPC frees a
// buffer of at least its pooling threshold (1 KiB) to its pool when the
// last reference goes, and the writer holds one until it has framed the
// bytes and given them back to the stream's write quota (grpc-go's
// loopyWriter.processData), later than the Send's own. A compressed
// message is sent from another buffer and frees this one early: the
// sender sends probes only on a stream that is not compressed
// (probesWork). A probe whose buffer gRPC would not pool (a changed
// threshold) is never put back: the sender then learns nothing, and its
// budget counts every byte, which is safe.
//
// Like the other messages, a probe is never reused once sent.
type sendProbe struct {
	batcherv1.SubmitStreamedResponse
	k batcherv1.SubmitStreamedResponse_Delta
	d batcherv1.Delta

	s    *streamedSender
	mark int64 // s.sent with this message counted
}

// probeBufSize is the capacity of a probe's buffer: above gRPC's pooling
// threshold, and room for a delta of text.
const probeBufSize = 2 << 10

var probeBufs = sync.Pool{New: func() any { b := make([]byte, 0, probeBufSize); return &b }}

// marshal encodes the probe into a buffer that gRPC gives back (Put).
func (p *sendProbe) marshal() (mem.BufferSlice, error) {
	return marshalProbe(&p.SubmitStreamedResponse, p)
}

// marshalProbe encodes m, a probe's message, into a buffer of probeBufs
// whose mem.BufferPool is pool, the probe: gRPC's freeing the buffer is
// the probe's Put.
func marshalProbe(m proto.Message, pool mem.BufferPool) (mem.BufferSlice, error) {
	bp := probeBufs.Get().(*[]byte)
	b, ok := appendDelta((*bp)[:0], m)
	if !ok {
		var err error
		if b, err = (proto.MarshalOptions{}).MarshalAppend((*bp)[:0], m); err != nil {
			probeBufs.Put(bp)
			return nil, err
		}
	}
	*bp = b
	return mem.BufferSlice{mem.NewBuffer(bp, pool)}, nil
}

// putProbeBuf gives a freed probe's buffer back to probeBufs, unless
// appendDelta grew it past probeBufSize.
func putProbeBuf(bp *[]byte) {
	if cap(*bp) == probeBufSize {
		*bp = (*bp)[:0]
		probeBufs.Put(bp)
	}
}

// Get implements mem.BufferPool; gRPC takes no buffer from a probe.
func (p *sendProbe) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// Put implements mem.BufferPool: gRPC is done with the probe's buffer, so
// its writer has taken every byte the sender had sent up to the probe.
func (p *sendProbe) Put(bp *[]byte) {
	p.s.taken.Store(p.mark)
	p.s.probing.Store(false)
	putProbeBuf(bp)
}

// probesWork reports whether the RPC of ctx sends its messages
// uncompressed, the buffer a probe is encoded into going to gRPC's writer
// itself (sendProbe). The stream's SendCompress is a method of grpc-go's
// transport stream, not of grpc.ServerTransportStream: without it, no
// probes (TestProbesWork notices a grpc-go that dropped it).
func probesWork(ctx context.Context) bool {
	sc, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ SendCompress() string })
	if !ok {
		return false
	}
	switch sc.SendCompress() {
	case "", encoding.Identity:
		return true
	}
	return false
}
