package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/upstream"
)

// maxMessageBytes bounds the upstream's own words in an error message.
const maxMessageBytes = upstream.MaxMessageBytes

// maxLogBodyBytes bounds the body kept in an error's cause, for logs.
const maxLogBodyBytes = 512

// StatusClass maps an upstream's HTTP status to its error class: 404 is
// not found (the backend's base URL or model is wrong: the operator's to
// fix, not the caller's); 400, 413 and 422 (and any other 4xx) an invalid
// request; 401 and 403 auth; 408 a timeout; 429 a rate limit; 409 and 5xx a
// server error. A status that is no error and no success (1xx, 3xx) is an
// invalid response.
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

// statusError builds the error for a non-2xx answer from the endpoint ep.
// Its Message names the status and the endpoint's path ("HTTP 404 Not
// Found from /v1/chat/completions") and adds at most a short, redacted
// piece of the upstream's own words, none for auth failures, whose
// messages may echo part of the key.
func (b *Backend) statusError(code int, ep string, body []byte, rl *batcher.RateLimitInfo) *batcher.UpstreamError {
	class := StatusClass(code)
	text := http.StatusText(code)
	upstream := b.redact(upstreamMessage(body, text))
	msg := fmt.Sprintf("HTTP %d %s from %s", code, text, ep)
	if text == "" {
		msg = fmt.Sprintf("HTTP %d from %s", code, ep)
	}
	switch {
	case code == http.StatusUnauthorized:
		msg += ": check the backend's API key"
	case code == http.StatusForbidden:
		msg += ": the backend's key lacks permission"
	case upstream != "":
		msg += ": " + upstream
	}
	if class == batcher.ClassRateLimit && rl != nil && rl.RetryAfter > 0 {
		msg += fmt.Sprintf("; retry after %v", rl.RetryAfter)
	}
	return &batcher.UpstreamError{
		Class:      class,
		StatusCode: code,
		Message:    msg,
		RateLimit:  rl,
		Err:        fmt.Errorf("HTTP %d from %s: %s", code, ep, b.redact(clip(string(body), maxLogBodyBytes))),
	}
}

// upstreamMessage digs the message out of an error body, or returns "".
// OpenAI's shape is {"error":{"message":...}}; others send {"error":
// "Not Found","message":"model x does not exist"} or {"detail":...}: every
// distinct part is kept, joined by ": ", but for one that only repeats
// the status text (skip).
func upstreamMessage(body []byte, skip string) string {
	var e errorResponse
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	var parts []string
	add := func(s string) {
		if s = clean(s); s != "" && !strings.EqualFold(s, skip) && !slices.Contains(parts, s) {
			parts = append(parts, s)
		}
	}
	if len(e.Error) > 0 {
		var d errorDetail
		var s string
		switch {
		case json.Unmarshal(e.Error, &d) == nil:
			add(d.Message)
		case json.Unmarshal(e.Error, &s) == nil:
			add(s)
		}
	}
	add(e.Message)
	var s string
	if json.Unmarshal(e.Detail, &s) == nil {
		add(s)
	}
	return clip(strings.Join(parts, ": "), maxMessageBytes)
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

// The upstream error helpers every HTTP backend shares.
var (
	clean           = upstream.Clean
	clip            = upstream.Clip
	transportError  = upstream.TransportError
	invalidResponse = upstream.InvalidResponse
)
