package batcher

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestBatchSpanLinksEveryRequestSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	be := &fakeBackend{}
	b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3}, WithTracerProvider(tp))

	parentCtx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	var calls []*Call
	for i := range 3 {
		c, err := b.Submit(parentCtx, req(fmt.Sprint(i), PriorityNormal))
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	for _, c := range calls {
		<-c.Done()
	}
	parent.End()

	var batch sdktrace.ReadOnlySpan
	reqs := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "batcher.batch m":
			batch = s
		case "batcher.request m":
			for _, a := range s.Attributes() {
				if a.Key == attrRequestID {
					reqs[a.Value.AsString()] = s
				}
			}
		}
	}
	if batch == nil || len(reqs) != 3 {
		t.Fatalf("recorded batch %v and %d request spans", batch, len(reqs))
	}
	if batch.Parent().IsValid() {
		t.Fatalf("batch span has parent %v, want a new root", batch.Parent())
	}
	var count int64
	for _, a := range batch.Attributes() {
		if a.Key == "messaging.batch.message_count" {
			count = a.Value.AsInt64()
		}
	}
	if count != 3 {
		t.Fatalf("messaging.batch.message_count = %d, want 3", count)
	}
	linked := map[trace.SpanID]string{}
	for _, l := range batch.Links() {
		for _, a := range l.Attributes {
			if a.Key == attrRequestID {
				linked[l.SpanContext.SpanID()] = a.Value.AsString()
			}
		}
	}
	for id, s := range reqs {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("request %s: parent %v, want the caller's span", id, s.Parent().SpanID())
		}
		if linked[s.SpanContext().SpanID()] != id {
			t.Errorf("request %s: the batch span does not link it with its id", id)
		}
		back := false
		for _, l := range s.Links() {
			back = back || l.SpanContext.SpanID() == batch.SpanContext().SpanID()
		}
		if !back {
			t.Errorf("request %s: no link back to the batch span", id)
		}
	}
}
