package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/batcherhq/batcher/batcher"
)

// maxMessageBytes bounds the upstream's own words in an error message.
const maxMessageBytes = 200

// maxLogBodyBytes bounds the body kept in an error's cause, for logs.
const maxLogBodyBytes = 512

// StatusClass maps an upstream's HTTP status to its error class: 400, 404,
// 413 and 422 (and any other 4xx) are an invalid request; 401 and 403 auth;
// 408 a timeout; 429 a rate limit; 409 and 5xx a server error. A status
// that is no error and no success (1xx, 3xx) is an invalid response.
func StatusClass(code int) batcher.ErrorClass {
	switch {
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

// statusError builds the error for a non-2xx answer. Its Message holds at
// most a short, redacted piece of the upstream's own message, and none for
// auth failures, whose messages may echo part of the key.
func (b *Backend) statusError(code int, body []byte, rl *batcher.RateLimitInfo) *batcher.UpstreamError {
	class := StatusClass(code)
	upstream := b.redact(upstreamMessage(body))
	var msg string
	switch {
	case code == http.StatusUnauthorized:
		msg = "authentication failed: check the backend's API key"
	case code == http.StatusForbidden:
		msg = "permission denied by the upstream"
	case class == batcher.ClassRateLimit:
		msg = "rate limited by the upstream"
		if rl != nil && rl.RetryAfter > 0 {
			msg += fmt.Sprintf("; retry after %v", rl.RetryAfter)
		}
	case upstream != "":
		msg = upstream
	default:
		msg = strings.ToLower(http.StatusText(code))
		if msg == "" {
			msg = "unexpected status"
		}
	}
	return &batcher.UpstreamError{
		Class:      class,
		StatusCode: code,
		Message:    msg,
		RateLimit:  rl,
		Err:        fmt.Errorf("HTTP %d: %s", code, b.redact(clip(string(body), maxLogBodyBytes))),
	}
}

// upstreamMessage digs the message out of an error body, or returns "".
func upstreamMessage(body []byte) string {
	var e errorResponse
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	if len(e.Error) > 0 {
		var d errorDetail
		if json.Unmarshal(e.Error, &d) == nil && d.Message != "" {
			return clean(d.Message)
		}
		var s string
		if json.Unmarshal(e.Error, &s) == nil {
			return clean(s)
		}
	}
	if e.Message != "" {
		return clean(e.Message)
	}
	var s string
	if json.Unmarshal(e.Detail, &s) == nil {
		return clean(s)
	}
	return ""
}

// keyLike matches strings shaped like provider API keys.
var keyLike = regexp.MustCompile(`\b(sk|pk|rk|gsk|xai)-[A-Za-z0-9_\-*.]{6,}`)

// redact removes the backend's key, and anything shaped like a key, from s.
func (b *Backend) redact(s string) string {
	if b.cfg.apiKey != "" {
		s = strings.ReplaceAll(s, b.cfg.apiKey, "[redacted]")
	}
	return keyLike.ReplaceAllString(s, "[redacted]")
}

// clean makes upstream text fit for a message: one line, printable, at most
// maxMessageBytes.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	return clip(strings.Join(strings.Fields(s), " "), maxMessageBytes)
}

// clip cuts s to n bytes at a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// transportError classifies a failure to get an answer: the caller's
// cancellation passes through as is; deadlines are timeouts; connection,
// reset and DNS failures are network errors.
func transportError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	ue := &batcher.UpstreamError{Class: batcher.ClassNetwork, Err: err}
	var dnsErr *net.DNSError
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		ue.Class, ue.Message = batcher.ClassTimeout, "upstream call timed out"
	case errors.As(err, &dnsErr):
		ue.Message = "DNS lookup of the upstream failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		ue.Message = "upstream refused the connection"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		ue.Message = "upstream reset the connection"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		ue.Message = "upstream closed the connection"
	case errors.As(err, &netErr) && netErr.Timeout():
		ue.Class, ue.Message = batcher.ClassTimeout, "upstream call timed out"
	case errors.As(err, &opErr):
		ue.Message = "connection to the upstream failed"
	default:
		ue.Message = "upstream call failed"
	}
	return ue
}

// invalidResponse is an answer Batcher cannot use.
func invalidResponse(code int, msg string, cause error) *batcher.UpstreamError {
	return &batcher.UpstreamError{Class: batcher.ClassInvalidResponse, StatusCode: code, Message: msg, Err: cause}
}
