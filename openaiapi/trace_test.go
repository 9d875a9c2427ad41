package openaiapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/openaiapi"
)

func newRecorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
	}
	t.Fatalf("no span %q among %q", name, names)
	return nil
}

// TestTrace: one trace runs from the SDK's call (an otelhttp client span
// sending traceparent) through the handler's server span and the core's
// request span to the batch span, whose context the provider's Dispatch
// gets; the batch span and the request span link to each other.
func TestTrace(t *testing.T) {
	clientRec, clientTP := newRecorder(t)
	serverRec, serverTP := newRecorder(t)
	f := newFake()
	e := newEnv(t, f,
		withCore(batcher.WithTracerProvider(serverTP)),
		withHandler(openaiapi.WithTracerProvider(serverTP)))
	sdk := openai.NewClient(option.WithBaseURL(e.url+"/"), option.WithAPIKey(testToken), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport,
			otelhttp.WithTracerProvider(clientTP), otelhttp.WithPropagators(propagation.TraceContext{}))}))

	ctx, root := clientTP.Tracer("test").Start(testCtx(t), "caller")
	if _, err := sdk.Chat.Completions.New(ctx, chatParams("chat", "traced")); err != nil {
		t.Fatal(err)
	}
	root.End()
	traceID := root.SpanContext().TraceID()

	clientSpan := spanNamed(t, clientRec.Ended(), "HTTP POST")
	if clientSpan.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("client span's parent %v, want the caller's span", clientSpan.Parent().SpanID())
	}
	ended := serverRec.Ended()
	httpSpan := spanNamed(t, ended, "POST /v1/chat/completions")
	if httpSpan.SpanKind() != trace.SpanKindServer || httpSpan.SpanContext().TraceID() != traceID ||
		httpSpan.Parent().SpanID() != clientSpan.SpanContext().SpanID() || !httpSpan.Parent().IsRemote() {
		t.Errorf("server span: trace %v parent %v, want trace %v under the client span %v",
			httpSpan.SpanContext().TraceID(), httpSpan.Parent().SpanID(), traceID, clientSpan.SpanContext().SpanID())
	}
	reqSpan := spanNamed(t, ended, "batcher.request chat")
	if reqSpan.SpanContext().TraceID() != traceID || reqSpan.Parent().SpanID() != httpSpan.SpanContext().SpanID() {
		t.Errorf("request span: trace %v parent %v, want a child of the server span", reqSpan.SpanContext().TraceID(), reqSpan.Parent().SpanID())
	}
	batchSpan := spanNamed(t, ended, "batcher.batch chat")
	linked := func(s sdktrace.ReadOnlySpan, to trace.SpanContext) bool {
		for _, l := range s.Links() {
			if l.SpanContext.SpanID() == to.SpanID() && l.SpanContext.TraceID() == to.TraceID() {
				return true
			}
		}
		return false
	}
	if !linked(batchSpan, reqSpan.SpanContext()) || !linked(reqSpan, batchSpan.SpanContext()) {
		t.Error("the batch and request spans do not link to each other")
	}
	// A refused call is traced too.
	resp, err := http.Get(e.url + "/models")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if s := spanNamed(t, serverRec.Ended(), "GET /v1/models"); resp.StatusCode != http.StatusUnauthorized || s.Status().Code.String() != "Unset" {
		t.Errorf("no token: %d, span status %v", resp.StatusCode, s.Status())
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.spans) != 1 || f.spans[0].SpanID() != batchSpan.SpanContext().SpanID() {
		t.Errorf("Dispatch's span %v, want the batch span %v", f.spans, batchSpan.SpanContext().SpanID())
	}
}
