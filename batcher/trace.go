package batcher

import (
	"context"
	"time"

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
	if rc := b.routes[r.Route]; rc != nil && span.IsRecording() {
		span.SetAttributes(genAIRequestAttrs(rc, &r.Params, r.Params.MaxTokens)...)
	}
	return span
}

// GenAI semantic-convention attributes (OpenTelemetry gen_ai.*) on request
// and batch spans, and the attempt attributes of dispatch events.
const (
	attrGenAIOp            = attribute.Key("gen_ai.operation.name")
	attrGenAIProvider      = attribute.Key("gen_ai.provider.name")
	attrGenAIRequestModel  = attribute.Key("gen_ai.request.model")
	attrGenAIMaxTokens     = attribute.Key("gen_ai.request.max_tokens")
	attrGenAITemperature   = attribute.Key("gen_ai.request.temperature")
	attrGenAITopP          = attribute.Key("gen_ai.request.top_p")
	attrGenAIInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrGenAIOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	attrGenAIFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	attrAttempt            = attribute.Key("batcher.attempt")
	attrRetryClass         = attribute.Key("error.type")
	attrRetryDelay         = attribute.Key("batcher.retry.delay_ms")
)

// finishReasonNames are the gen_ai.response.finish_reasons values.
var finishReasonNames = [...]string{FinishUnspecified: "", FinishStop: "stop", FinishLength: "length", FinishContentFilter: "content_filter"}

func (f FinishReason) genAI() string {
	if int(f) < len(finishReasonNames) {
		return finishReasonNames[f]
	}
	return ""
}

// genAIRequestAttrs are a request's gen_ai.request.* attributes: the
// operation, the provider and model of the route's first target, and the
// generation parameters that are set.
func genAIRequestAttrs(rc *routeConfig, p *Params, maxTokens int32) []attribute.KeyValue {
	t := rc.targets[0]
	kv := make([]attribute.KeyValue, 0, 6)
	kv = append(kv,
		attrGenAIOp.String(genAIOperation(rc.Op)),
		attrGenAIProvider.String(providerName(t.be)),
		attrGenAIRequestModel.String(t.model),
	)
	if rc.Op == OpEmbedding {
		return kv
	}
	if maxTokens == 0 {
		maxTokens = rc.DefaultMaxTokens
	}
	kv = append(kv, attrGenAIMaxTokens.Int(int(maxTokens)))
	if p.Temperature != nil {
		kv = append(kv, attrGenAITemperature.Float64(float64(*p.Temperature)))
	}
	if p.TopP != nil {
		kv = append(kv, attrGenAITopP.Float64(float64(*p.TopP)))
	}
	return kv
}

// setResultAttrs puts a request's usage and finish reason on its span.
func setResultAttrs(span trace.Span, r *Result) {
	if r.Err != nil {
		return
	}
	kv := []attribute.KeyValue{
		attrGenAIInputTokens.Int(int(r.Usage.PromptTokens)),
		attrGenAIOutputTokens.Int(int(r.Usage.CompletionTokens)),
	}
	if f := r.FinishReason.genAI(); f != "" {
		kv = append(kv, attrGenAIFinishReasons.StringSlice([]string{f}))
	}
	span.SetAttributes(kv...)
}

// genAIBatchAttrs are a batch's gen_ai.* attributes: its target's provider
// and model and the lane's parameters.
func (r *batchRun) genAIBatchAttrs(first *Request) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		attrGenAIOp.String(genAIOperation(r.batch.Op)),
		attrGenAIProvider.String(providerName(r.be)),
		attrGenAIRequestModel.String(r.batch.Model),
	}
	if r.batch.Op == OpEmbedding {
		return kv
	}
	// Only the parameters the batch shares describe it; a fan-out batch's
	// requests carry their own (on their request spans).
	shared := r.lane.route.targets[r.lane.key.target].shared
	if shared.Has(ParamMaxTokens) {
		kv = append(kv, attrGenAIMaxTokens.Int(int(r.batch.MaxTokens)))
	}
	if t := first.Params.Temperature; t != nil && shared.Has(ParamTemperature) {
		kv = append(kv, attrGenAITemperature.Float64(float64(*t)))
	}
	if t := first.Params.TopP; t != nil && shared.Has(ParamTopP) {
		kv = append(kv, attrGenAITopP.Float64(float64(*t)))
	}
	return kv
}

// setBatchResultAttrs puts a batch's summed usage and its distinct finish
// reasons on its span.
func setBatchResultAttrs(span trace.Span, out []Response) {
	var in, outTok int
	var reasons []string
	seen := [len(finishReasonNames)]bool{}
	for i := range out {
		if out[i].Err != nil {
			continue
		}
		in += int(out[i].Usage.PromptTokens)
		outTok += int(out[i].Usage.CompletionTokens)
		if f := out[i].FinishReason; int(f) < len(seen) && !seen[f] && f.genAI() != "" {
			seen[f] = true
			reasons = append(reasons, f.genAI())
		}
	}
	kv := []attribute.KeyValue{attrGenAIInputTokens.Int(in), attrGenAIOutputTokens.Int(outTok)}
	if len(reasons) > 0 {
		kv = append(kv, attrGenAIFinishReasons.StringSlice(reasons))
	}
	span.SetAttributes(kv...)
}

// dispatchEvent adds a "batcher.dispatch" event with the attempt number to
// a request's span.
func (c *Call) dispatchEvent(r *batchRun, at time.Time) {
	if c.span == nil || !c.span.IsRecording() {
		return
	}
	c.span.AddEvent("batcher.dispatch", trace.WithTimestamp(at), trace.WithAttributes(
		attrAttempt.Int(int(c.attempts)), attrBatchID.String(r.batch.ID), attrBackend.String(r.be.name)))
}

// retryEvent adds a "batcher.retry" event to a request's span: the attempt
// that failed, its error class and the wait before the next.
func (c *Call) retryEvent(at time.Time, class ErrorClass, delay time.Duration) {
	if c.span == nil || !c.span.IsRecording() {
		return
	}
	c.span.AddEvent("batcher.retry", trace.WithTimestamp(at), trace.WithAttributes(
		attrAttempt.Int(int(c.attempts)), attrRetryClass.String(class.String()), attrRetryDelay.Int64(delay.Milliseconds())))
}
