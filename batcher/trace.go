package batcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes. The batch size uses the OpenTelemetry messaging
// convention, since a batch is a message batch to its provider.
const (
	attrBatchSize = attribute.Key("messaging.batch.message_count")
	attrBatchID   = attribute.Key("batcher.batch.id")
	attrRequestID = attribute.Key("batcher.request.id")
	attrRoute     = attribute.Key("batcher.route")
	attrBackend   = attribute.Key("batcher.backend")
	attrPriority  = attribute.Key("batcher.priority")
)

const tracerName = "github.com/batcherhq/batcher/batcher"

// startRequestSpan starts a request's span as a child of ctx's span.
func (b *Batcher) startRequestSpan(ctx context.Context, r *Request) trace.Span {
	_, span := b.tracer.Start(ctx, "batcher.request "+r.Route,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attrRequestID.String(r.ID),
			attrRoute.String(r.Route),
			attrPriority.String(r.Priority.String()),
		))
	return span
}
