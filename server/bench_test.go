package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// BenchmarkSubmit measures unary round trips through server and core over
// bufconn, many callers at once.
func BenchmarkSubmit(b *testing.B) {
	e := newEnv(b, newFake(), withConcurrency(64),
		withBatch(batcher.BatchConfig{Window: 200 * time.Microsecond, MaxBatchSize: 32}))
	ctx := testCtx(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := &batcherv1.SubmitRequest{Request: chatReq("", "hello")}
		for pb.Next() {
			if _, err := e.client.Submit(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkStream measures requests through one stream, completions only.
func BenchmarkStream(b *testing.B) {
	e := newEnv(b, newFake(), withConcurrency(64),
		withBatch(batcher.BatchConfig{Window: 200 * time.Microsecond, MaxBatchSize: 32}))
	s := e.openStream(b, testCtx(b))
	s.send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}))
	msgs := make([]*batcherv1.SubmitStreamRequest, b.N)
	for i := range msgs {
		msgs[i] = reqMsg(chatReq(fmt.Sprint(i), "hello"))
	}
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for _, m := range msgs {
			if err := s.Send(m); err != nil {
				return
			}
		}
		_ = s.CloseSend()
	}()
	done := 0
	for done < b.N {
		m, err := s.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if m.GetCompletion() != nil {
			done++
		}
	}
	b.StopTimer()
	if _, err := s.drain(); err != nil {
		b.Fatal(err)
	}
}
