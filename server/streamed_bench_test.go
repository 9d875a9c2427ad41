package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// pacedFake streams n deltas, each after the caller has received the one
// before (ack), so that no two are joined: a delta's whole path, one at a
// time, as a model's tokens come to a caller that keeps up. Each is
// "token ", or with numbered its index ("0 ", "1 ", ...), for a test that
// checks their order.
type pacedFake struct {
	n        int
	ack      chan struct{}
	numbered bool
}

func (f *pacedFake) Dispatch(context.Context, *batcher.Batch, []batcher.Response) error {
	return errors.New("pacedFake: only streams")
}

func (f *pacedFake) Stream(ctx context.Context, _ *batcher.Batch, w batcher.DeltaWriter) (batcher.Response, error) {
	for i := range f.n {
		text := "token "
		if f.numbered {
			text = strconv.Itoa(i) + " "
		}
		if err := w.WriteDelta(&batcher.Delta{Text: text}); err != nil {
			return batcher.Response{}, err
		}
		select {
		case <-f.ack:
		case <-ctx.Done():
			return batcher.Response{}, ctx.Err()
		}
	}
	return batcher.Response{FinishReason: batcher.FinishStop}, nil
}

// BenchmarkSubmitStreamedDelta measures one delta of a SubmitStreamed
// answer from the backend's WriteDelta to the client's Recv, over bufconn
// through NewGRPCServer's stack, one delta in flight at a time (the
// client's receipt releases the next), in answers of 40 deltas as
// bench.BenchmarkStreamTTFT's (each chat's start is counted too, over its
// 40 deltas). cpu-ns/delta is the process's CPU time (client included) per
// delta, which a busy machine distorts less than ns/op.
func BenchmarkSubmitStreamedDelta(b *testing.B) { benchStreamedDeltas(b, 40) }

// BenchmarkSubmitStreamedLongAnswer is BenchmarkSubmitStreamedDelta with
// answers of 2,000 deltas: a long answer, past the bytes a call may send
// from the backend's goroutine straight (streamedSender), whose other
// deltas each wake the handler.
func BenchmarkSubmitStreamedLongAnswer(b *testing.B) { benchStreamedDeltas(b, 2000) }

func benchStreamedDeltas(b *testing.B, perChat int) {
	f := &pacedFake{n: perChat, ack: make(chan struct{})}
	e := newEnv(b, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "paced", Backend: f, MaxConcurrency: 1}),
		batcher.WithRoute(batcher.Route{Name: routeStream, Op: batcher.OpChat, Backend: "paced"}),
	))
	ctx := testCtx(b)
	b.ReportAllocs()
	c0, r0 := rusageCPU(b), e.srv.relayed.Load()
	b.ResetTimer()
	deltas := 0
	for deltas < b.N {
		ss, err := e.client.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: streamedReq("", "hello")})
		if err != nil {
			b.Fatal(err)
		}
		for {
			m, err := ss.Recv()
			if err != nil {
				b.Fatal(err)
			}
			if m.GetCompletion() != nil {
				break
			}
			if m.GetDelta().GetText() != "" { // not the last, which has the finish reason alone
				deltas++
				f.ack <- struct{}{}
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rusageCPU(b)-c0)/float64(deltas), "cpu-ns/delta")
	b.ReportMetric(float64(e.srv.relayed.Load()-r0)/float64(deltas), "relayed/delta")
}

// rusageCPU returns the process's CPU time so far, user and system.
func rusageCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSubmitStreamDeltas is BenchmarkSubmitStreamedDelta on one
// SubmitStream: streamDeltasInFlight streamed requests at a time, answers
// of 250 deltas, each delta written once the client has received one (so
// that as many deltas are in flight as requests). relayed/delta is the
// share of deltas the stream's sender sent after a wake-up.
func BenchmarkSubmitStreamDeltas(b *testing.B) {
	const inFlight, perChat = 8, 250
	f := &pacedFake{n: perChat, ack: make(chan struct{}, inFlight)}
	e := newEnv(b, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "paced", Backend: f, MaxConcurrency: 64}),
		batcher.WithRoute(batcher.Route{Name: routeStream, Op: batcher.OpChat, Backend: "paced"}),
	))
	s := e.openStream(b, testCtx(b))
	s.send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}))
	b.ReportAllocs()
	c0, r0 := rusageCPU(b), e.srv.relayed.Load()
	b.ResetTimer()
	sent := 0
	for range inFlight {
		s.send(reqMsg(streamedReq(fmt.Sprint(sent), "hello")))
		sent++
	}
	deltas, open := 0, inFlight
	for open > 0 {
		m, err := s.Recv()
		if err != nil {
			b.Fatal(err)
		}
		switch {
		case m.GetCompletion() != nil:
			open--
			if deltas < b.N {
				s.send(reqMsg(streamedReq(fmt.Sprint(sent), "hello")))
				sent++
				open++
			}
		case m.GetDelta().GetText() != "":
			deltas++
			f.ack <- struct{}{}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rusageCPU(b)-c0)/float64(deltas), "cpu-ns/delta")
	b.ReportMetric(float64(e.srv.relayed.Load()-r0)/float64(deltas), "relayed/delta")
}
