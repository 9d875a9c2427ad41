package server

import (
	"context"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

func newRecorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// remote is a caller's span, as a traceparent.
type remote struct {
	traceparent string
	trace       string
	span        string
}

var (
	remoteA = remote{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"}
	remoteB = remote{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"}
)

func (r remote) is(sc trace.SpanContext) bool {
	return sc.TraceID().String() == r.trace && sc.SpanID().String() == r.span && sc.IsRemote()
}

func spansNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(kvs []attribute.KeyValue, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func startedSpans(rec *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Started() {
		out = append(out, s)
	}
	return out
}

// TestTracingStream: each request span is a child of its item's
// traceparent or of the stream's span; the batch span is a new root linked
// to every request span, which links back.
func TestTracingStream(t *testing.T) {
	rec, tp := newRecorder(t)
	e := newEnv(t, newFake(), withTracing(tp),
		withBatch(batcher.BatchConfig{Window: time.Hour, MaxWait: time.Hour, MinBatchSize: 3, MaxBatchSize: 3}))
	s := e.openStream(t, testCtx(t))
	a, b, c := chatReq("a", "x"), chatReq("b", "x"), chatReq("c", "x")
	a.Traceparent = remoteA.traceparent
	b.Traceparent, b.Tracestate = remoteB.traceparent, "vendor=1"
	for _, r := range []*batcherv1.Request{a, b, c} {
		s.send(reqMsg(r))
	}
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tallyOf(msgs).completions); n != 3 {
		t.Fatalf("%d completions", n)
	}

	streamSpans := spansNamed(startedSpans(rec), "batcher.v1.BatcherService/SubmitStream")
	if len(streamSpans) != 1 {
		t.Fatalf("%d stream spans", len(streamSpans))
	}
	streamSC := streamSpans[0].SpanContext()

	ended := rec.Ended()
	reqSpans := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spansNamed(ended, "batcher.request "+routeChat) {
		v, _ := attr(sp.Attributes(), "batcher.request.id")
		reqSpans[v.AsString()] = sp
	}
	if len(reqSpans) != 3 {
		t.Fatalf("request spans: %v", reqSpans)
	}
	if p := reqSpans["a"].Parent(); !remoteA.is(p) {
		t.Errorf("a's parent = %v, want the item's traceparent", p)
	}
	if p := reqSpans["b"].Parent(); !remoteB.is(p) {
		t.Errorf("b's parent = %v, want the item's traceparent", p)
	}
	if ts := reqSpans["b"].SpanContext().TraceState().Get("vendor"); ts != "1" {
		t.Errorf("b's tracestate vendor = %q, want 1", ts)
	}
	if p := reqSpans["c"].Parent(); p.SpanID() != streamSC.SpanID() || p.TraceID() != streamSC.TraceID() {
		t.Errorf("c's parent = %v, want the stream's span %v", p, streamSC)
	}

	batches := spansNamed(ended, "batcher.batch "+routeChat)
	if len(batches) != 1 {
		t.Fatalf("%d batch spans, want 1", len(batches))
	}
	bs := batches[0]
	if bs.Parent().IsValid() {
		t.Errorf("batch span has parent %v, want a new root", bs.Parent())
	}
	if v, ok := attr(bs.Attributes(), "messaging.batch.message_count"); !ok || v.AsInt64() != 3 {
		t.Errorf("messaging.batch.message_count = %v (set: %v), want 3", v.AsInt64(), ok)
	}
	linked := map[string]bool{}
	for _, l := range bs.Links() {
		v, _ := attr(l.Attributes, "batcher.request.id")
		id := v.AsString()
		if rs := reqSpans[id]; rs == nil || rs.SpanContext().SpanID() != l.SpanContext.SpanID() {
			t.Errorf("batch link %v with id %q does not point at that request's span", l.SpanContext, id)
		}
		linked[id] = true
	}
	if len(linked) != 3 {
		t.Errorf("batch links to %v, want a, b and c", linked)
	}
	for id, rs := range reqSpans {
		back := false
		for _, l := range rs.Links() {
			if l.SpanContext.SpanID() == bs.SpanContext().SpanID() && l.SpanContext.TraceID() == bs.SpanContext().TraceID() {
				back = true
			}
		}
		if !back {
			t.Errorf("request %s's span does not link to the batch span", id)
		}
	}
}

// TestTracingSubmit: a unary request's span is a child of the RPC's span,
// which continues the caller's trace from the RPC metadata.
func TestTracingSubmit(t *testing.T) {
	rec, tp := newRecorder(t)
	e := newEnv(t, newFake(), withTracing(tp))
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "traceparent", remoteA.traceparent)
	req := chatReq("u", "x")
	req.Traceparent = remoteB.traceparent // ignored by Submit
	if _, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: req}); err != nil {
		t.Fatal(err)
	}
	rpc := spansNamed(startedSpans(rec), "batcher.v1.BatcherService/Submit")
	if len(rpc) != 1 {
		t.Fatalf("%d RPC spans", len(rpc))
	}
	if !remoteA.is(rpc[0].Parent()) {
		t.Errorf("RPC span's parent = %v, want the caller's", rpc[0].Parent())
	}
	reqs := spansNamed(rec.Ended(), "batcher.request "+routeChat)
	if len(reqs) != 1 || reqs[0].Parent().SpanID() != rpc[0].SpanContext().SpanID() {
		t.Fatalf("request spans %v, want one child of the RPC span", reqs)
	}
}

// TestTracingRejection: with a tracer provider, a rejected stream request
// leaves an error span in the caller's trace.
func TestTracingRejection(t *testing.T) {
	rec, tp := newRecorder(t)
	e := newEnv(t, newFake(), withTracing(tp), withServer(WithTracerProvider(tp)))
	s := e.openStream(t, testCtx(t))
	bad := chatReq("bad", "x")
	bad.Model = "nope"
	bad.Traceparent = remoteA.traceparent
	s.send(reqMsg(bad))
	_ = s.CloseSend()
	if _, err := s.drain(); err != nil {
		t.Fatal(err)
	}
	rej := spansNamed(rec.Ended(), "batcher.reject")
	if len(rej) != 1 || !remoteA.is(rej[0].Parent()) || rej[0].Status().Code != codes.Error {
		t.Fatalf("reject spans %v, want one error span under the item's traceparent", rej)
	}
}
