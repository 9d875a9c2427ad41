package openai

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"syscall"

	"github.com/batcherhq/batcher/batcher"
)

// failureLog is the message of every logged upstream failure; the kind
// attribute tells them apart.
const failureLog = "openai: upstream call failed"

// logFailure logs a failed call to path for items requests of batch: at
// most one record per kind of failure and endpoint per LogInterval, the
// next one counting those left out ("suppressed"). It logs with ctx, so
// that a handler that reads the trace context adds trace_id and span_id.
// The caller's own cancellation is not logged.
func (b *Backend) logFailure(ctx context.Context, path string, batch *batcher.Batch, items int, err error) {
	var ue *batcher.UpstreamError
	if !errors.As(err, &ue) {
		return
	}
	kind, level := failureKind(ue)
	if !b.log.Enabled(ctx, level) {
		return
	}
	ep := b.cfg.endpointPath(path)
	ok, suppressed := b.logs.Allow(kind+" "+ep, b.now())
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 11)
	attrs = append(attrs,
		slog.String("kind", kind),
		slog.String("class", ue.Class.String()),
		slog.String("path", ep),
		slog.String("route", batch.Route),
		slog.String("model", batch.Model),
		slog.Int("requests", items),
		slog.String("message", ue.Message))
	if ue.StatusCode != 0 {
		attrs = append(attrs, slog.Int("status", ue.StatusCode))
	}
	if rl := ue.RateLimit; rl != nil && rl.RetryAfter > 0 {
		attrs = append(attrs, slog.String("retry_after", rl.RetryAfter.String()))
	}
	if ue.Err != nil {
		// Redacted as the message is: a body may echo the key. A transport
		// error's URL is cut to its path: a query may carry a secret.
		cause := ue.Err.Error()
		var ue2 *url.Error
		if errors.As(ue.Err, &ue2) {
			cause = ue2.Op + " " + ep + ": " + ue2.Err.Error()
		}
		attrs = append(attrs, slog.String("cause", b.redact(clip(cause, maxLogBodyBytes))))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	b.log.LogAttrs(ctx, level, failureLog, attrs...)
}

// failureKind names a failure for the logs and picks its level: the
// operator's misconfiguration (404, auth) is an error; trouble upstream a
// warning; the request's own fault (other 4xx) is for debugging.
func failureKind(ue *batcher.UpstreamError) (string, slog.Level) {
	switch ue.Class {
	case batcher.ClassNotFound:
		return "not_found", slog.LevelError
	case batcher.ClassAuth:
		return "auth", slog.LevelError
	case batcher.ClassRateLimit:
		return "rate_limited", slog.LevelWarn
	case batcher.ClassServer:
		return "server_error", slog.LevelWarn
	case batcher.ClassTimeout:
		return "timeout", slog.LevelWarn
	case batcher.ClassNetwork:
		if errors.Is(ue.Err, syscall.ECONNREFUSED) {
			return "refused", slog.LevelWarn
		}
		return "network", slog.LevelWarn
	case batcher.ClassInvalidResponse:
		return "invalid_response", slog.LevelWarn
	case batcher.ClassInvalidRequest:
		if ue.StatusCode == http.StatusRequestEntityTooLarge {
			return "too_large", slog.LevelDebug
		}
		return "invalid_request", slog.LevelDebug
	}
	return "unknown", slog.LevelWarn
}
