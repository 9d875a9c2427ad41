// Package upstream holds what every HTTP backend (backend/openai,
// backend/anthropic) builds the same way: its pooled transport, its traced
// client that never follows a redirect, its rate limit on failure logs,
// and reading a streamed response to its end (Drain).
package upstream

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// NewTransport returns a pooled transport keeping at most maxIdle idle
// connections (to any host, and to one: a backend calls one host), with
// tlsCfg (cloned) when it is not nil.
//
// Its HTTP/1.1 connections buffer connBuffer bytes each way, not
// net/http's 4 KiB: a connection holds both buffers for as long as it
// lives, and a streamed answer holds its connection open for as long as
// it lasts, so with 2,000 answers open they were 16 MB of batcherd's heap.
// What passes through them is small (a request's headers, a response's
// headers and its chunk lines): a body larger than the buffer is read
// and written straight, past it.
func NewTransport(maxIdle int, tlsCfg *tls.Config) *http.Transport {
	t := &http.Transport{
		ReadBufferSize:        connBuffer,
		WriteBufferSize:       connBuffer,
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          maxIdle,
		MaxIdleConnsPerHost:   maxIdle,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg.Clone()
	}
	return t
}

// connBuffer is the size of each HTTP/1.1 connection's read and write
// buffers (NewTransport).
const connBuffer = 1 << 10

// NewClient returns a client over rt whose calls are client spans named
// "<system> <method> <path>" (with tp; nil: the global provider) carrying
// the trace context by prop. It follows no redirect: a redirect would
// resend the body, and the key, elsewhere, so a 3xx is an invalid
// response instead.
//
// Its calls record no http.client.* metrics: the core measures every
// upstream call itself (gen_ai.client.operation.duration and
// batcher_upstream_calls_total, with the backend and the error type), and
// otelhttp's duplicate series cost each call about 9 µs of CPU and 26
// allocations. So a call goes through otelhttp only when a trace needs it
// (traced.RoundTrip); otherwise straight to rt.
func NewClient(rt http.RoundTripper, system string, prop propagation.TextMapPropagator, tp trace.TracerProvider) *http.Client {
	opts := []otelhttp.Option{
		otelhttp.WithPropagators(prop),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return system + " " + r.Method + " " + r.URL.Path }),
	}
	if tp != nil {
		opts = append(opts, otelhttp.WithTracerProvider(tp))
	}
	return &http.Client{
		Transport:     &traced{base: rt, otel: otelhttp.NewTransport(rt, opts...), tp: tp},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// traced sends a call through otelhttp when a trace needs it: to continue
// one (the call's context holds a valid span context, recording or not:
// otelhttp makes the client span and injects traceparent, so that a trace
// follows the request upstream), to carry baggage, or to start one (its
// tracer provider may record a root span). Otherwise the call goes
// straight to base: otelhttp would make a span that records nothing and
// inject nothing.
type traced struct {
	base http.RoundTripper
	otel http.RoundTripper
	tp   trace.TracerProvider // nil: the global one, looked up per call
}

func (t *traced) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.spans(r.Context()) {
		return t.otel.RoundTrip(r)
	}
	return t.base.RoundTrip(r)
}

// spans reports whether a call with ctx may make or continue a trace.
func (t *traced) spans(ctx context.Context) bool {
	if trace.SpanContextFromContext(ctx).IsValid() || baggage.FromContext(ctx).Len() > 0 {
		return true
	}
	tp := t.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
		if tp == unsetTracerProvider {
			return false // the global delegate, before any provider was set: its spans are no-ops
		}
	}
	_, noop := tp.(tracenoop.TracerProvider)
	return !noop
}

// unsetTracerProvider is what otel.GetTracerProvider returns before a
// provider is set.
var unsetTracerProvider = otel.GetTracerProvider()

// LogLimiter lets one record per key through per interval and counts the
// others. Keys are a small, fixed set (a kind and an endpoint).
type LogLimiter struct {
	interval time.Duration
	mu       sync.Mutex
	keys     map[string]*logSlot
}

type logSlot struct {
	last       time.Time
	suppressed int
}

// NewLogLimiter returns a LogLimiter letting one record a key through per
// interval.
func NewLogLimiter(interval time.Duration) *LogLimiter {
	return &LogLimiter{interval: interval, keys: make(map[string]*logSlot)}
}

// Allow reports whether a record for key may go out at now, and how many
// were held back since the last one that did.
func (l *LogLimiter) Allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[key]
	if s == nil {
		s = &logSlot{}
		l.keys[key] = s
	} else if now.Sub(s.last) < l.interval {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	return true, n
}

// drainWait and maxDrainBytes bound what Drain reads.
const (
	drainWait     = 50 * time.Millisecond
	maxDrainBytes = 4096
)
