package client_test

import (
	"testing"

	"github.com/batcherhq/batcher/client"
)

// BenchmarkStreamSendWait measures one request's round trip through the
// client's stream machinery against the fake (no batching, no backend), with
// many goroutines sharing one stream.
func BenchmarkStreamSendWait(b *testing.B) {
	c := newClient(b, &fakeServer{})
	s, err := c.Stream(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	req := client.Complete("sim", "hello")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h, err := s.Send(b.Context(), req)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := h.Wait(b.Context()); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if err := s.Close(b.Context()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSubmit is the unary baseline.
func BenchmarkSubmit(b *testing.B) {
	c := newClient(b, &fakeServer{})
	req := client.Complete("sim", "hello")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Submit(b.Context(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
