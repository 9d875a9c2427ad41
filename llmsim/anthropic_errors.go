package llmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

func anthropicBadRequest(w http.ResponseWriter, msg string) {
	anthropicError(w, http.StatusBadRequest, "invalid_request_error", msg)
}

func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// anthropicHeaders turns the x-ratelimit-* headers limits.take wrote into
// Anthropic's anthropic-ratelimit-* ones (the reset an RFC 3339 time), and
// drops retry-after-ms, which Anthropic does not send.
func anthropicHeaders(h http.Header, now time.Time) {
	h.Del("retry-after-ms")
	for _, kind := range []string{"requests", "tokens"} {
		limit, remaining, reset := "x-ratelimit-limit-"+kind, "x-ratelimit-remaining-"+kind, "x-ratelimit-reset-"+kind
		if v := h.Get(limit); v != "" {
			h.Set("anthropic-ratelimit-"+kind+"-limit", v)
		}
		if v := h.Get(remaining); v != "" {
			h.Set("anthropic-ratelimit-"+kind+"-remaining", v)
		}
		if d, err := time.ParseDuration(h.Get(reset)); err == nil {
			// Whole seconds, rounded up, as Anthropic's resets are.
			t := now.Add(d).Add(time.Second - 1).Truncate(time.Second)
			h.Set("anthropic-ratelimit-"+kind+"-reset", t.UTC().Format(time.RFC3339))
		}
		h.Del(limit)
		h.Del(remaining)
		h.Del(reset)
	}
}

// anthropicFault writes the ErrorRate fault: 500 api_error, or 529
// overloaded_error with retry-after.
func (s *Server) anthropicFault(w http.ResponseWriter, r *http.Request) {
	if s.draw() < 0.5 {
		s.cfg.Logger.Debug("fault: server error", "path", r.URL.Path, "status", http.StatusInternalServerError)
		anthropicError(w, http.StatusInternalServerError, "api_error", "Internal server error")
		return
	}
	s.cfg.Logger.Debug("fault: overloaded", "path", r.URL.Path, "status", 529)
	w.Header().Set("retry-after", "1")
	anthropicError(w, 529, "overloaded_error", "Overloaded")
}

// anthropicRateLimited writes a 429 rate_limit_error.
func anthropicRateLimited(w http.ResponseWriter, v verdict, cost, tpm int) {
	if v.tooLarge {
		anthropicError(w, http.StatusTooManyRequests, "rate_limit_error",
			fmt.Sprintf("This request would exceed the rate limit of %d input tokens per minute (it asks for %d).", tpm, cost))
		return
	}
	anthropicError(w, http.StatusTooManyRequests, "rate_limit_error",
		fmt.Sprintf("This request would exceed your organization's rate limit of %s per minute. Please try again in %s.", v.reason, FormatReset(v.retryAfter)))
}
