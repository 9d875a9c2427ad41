package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/upstream"
)

// maxLogBodyBytes bounds the body kept in an error's cause, for logs.
const maxLogBodyBytes = 512

// StatusOverloaded is Anthropic's 529: the API is overloaded. It is a
// server error, retried like a 503.
const StatusOverloaded = 529

// StatusClass maps an upstream's HTTP status to its error class: 404 not
// found (the backend's base URL or model is wrong); 401 and 403 auth; 408
// a timeout; 429 a rate limit; 409, 5xx and 529 (overloaded) a server
// error, all retryable; any other 4xx an invalid request, not retried. A
// status that is no error and no success is an invalid response.
func StatusClass(code int) batcher.ErrorClass {
	switch {
	case code == http.StatusNotFound:
		return batcher.ClassNotFound
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return batcher.ClassAuth
	case code == http.StatusRequestTimeout:
		return batcher.ClassTimeout
	case code == http.StatusTooManyRequests:
		return batcher.ClassRateLimit
	case code == http.StatusConflict || code >= 500 && code < 600:
		return batcher.ClassServer
	case code >= 400 && code < 500:
		return batcher.ClassInvalidRequest
	}
	return batcher.ClassInvalidResponse
}

// statusError builds the error for a non-2xx answer from the endpoint ep:
// the status, the path, and a short, redacted piece of Anthropic's own
// message (none for auth failures).
func (b *Backend) statusError(code int, ep string, body []byte, rl *batcher.RateLimitInfo) *batcher.UpstreamError {
	class := StatusClass(code)
	text := http.StatusText(code)
	if code == StatusOverloaded {
		text = "Overloaded"
	}
	msg := fmt.Sprintf("HTTP %d %s from %s", code, text, ep)
	if text == "" {
		msg = fmt.Sprintf("HTTP %d from %s", code, ep)
	}
	upstream := b.redact(upstreamMessage(body, text))
	switch {
	case code == http.StatusUnauthorized:
		msg += ": check the backend's API key"
	case code == http.StatusForbidden:
		msg += ": the backend's key lacks permission"
	case upstream != "":
		msg += ": " + upstream
	}
	if (class == batcher.ClassRateLimit || class == batcher.ClassServer) && rl != nil && rl.RetryAfter > 0 {
		msg += fmt.Sprintf("; retry after %v", rl.RetryAfter)
	}
	return &batcher.UpstreamError{Class: class, StatusCode: code, Message: msg, RateLimit: rl,
		Err: fmt.Errorf("HTTP %d from %s: %s", code, ep, b.redact(clip(string(body), maxLogBodyBytes)))}
}

// upstreamMessage digs Anthropic's message (and its error type, when the
// message is empty) out of an error body, or returns "".
func upstreamMessage(body []byte, skip string) string {
	var e errorResponse
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	s := clean(e.Error.Message)
	if s == "" {
		s = clean(e.Error.Type)
	}
	if strings.EqualFold(s, skip) {
		return ""
	}
	return s
}

// keyLike matches strings shaped like provider API keys.
var keyLike = regexp.MustCompile(`\b(sk-ant|sk|pk|rk)-[A-Za-z0-9_\-*.]{6,}`)

// redact removes the backend's key, and anything shaped like a key, from s.
func (b *Backend) redact(s string) string {
	if b.cfg.apiKey != "" {
		s = strings.ReplaceAll(s, b.cfg.apiKey, "[redacted]")
	}
	return keyLike.ReplaceAllString(s, "[redacted]")
}

// The upstream error helpers every HTTP backend shares.
var (
	clean           = upstream.Clean
	clip            = upstream.Clip
	transportError  = upstream.TransportError
	invalidResponse = upstream.InvalidResponse
)

// failureLog is the message of every logged upstream failure.
const failureLog = "anthropic: upstream call failed"

// logFailure logs a failed call of batch: at most one record per kind of
// failure per LogInterval. The caller's own cancellation is not logged.
func (b *Backend) logFailure(ctx context.Context, batch *batcher.Batch, err error) {
	var ue *batcher.UpstreamError
	if !errors.As(err, &ue) {
		return
	}
	level := slog.LevelWarn
	switch ue.Class {
	case batcher.ClassNotFound, batcher.ClassAuth:
		level = slog.LevelError
	case batcher.ClassInvalidRequest:
		level = slog.LevelDebug
	}
	if !b.log.Enabled(ctx, level) {
		return
	}
	ok, suppressed := b.logs.Allow(ue.Class.String(), time.Now())
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("class", ue.Class.String()), slog.String("path", b.cfg.endpointPath(messagesPath)),
		slog.String("route", batch.Route), slog.String("model", batch.Model), slog.String("message", ue.Message)}
	if ue.StatusCode != 0 {
		attrs = append(attrs, slog.Int("status", ue.StatusCode))
	}
	if ue.Err != nil {
		cause := ue.Err.Error()
		var ue2 *url.Error
		if errors.As(ue.Err, &ue2) {
			cause = ue2.Op + " " + b.cfg.endpointPath(messagesPath) + ": " + ue2.Err.Error()
		}
		attrs = append(attrs, slog.String("cause", b.redact(clip(cause, maxLogBodyBytes))))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	b.log.LogAttrs(ctx, level, failureLog, attrs...)
}
