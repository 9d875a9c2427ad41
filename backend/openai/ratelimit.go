package openai

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// maxWait caps any duration an upstream asks for, so that a bad header
// cannot stall a route for days.
const maxWait = time.Hour

// ParseRateLimit reads what an answer's headers say about the upstream's
// limits: Retry-After (seconds or an HTTP date, or retry-after-ms), and
// x-ratelimit-limit-requests, -limit-tokens, -remaining-requests,
// -remaining-tokens, -reset-requests and -reset-tokens (OpenAI's "1s",
// "6m0s", "20ms", or bare seconds). It returns nil when none is given;
// values it cannot read count as not given.
func ParseRateLimit(h http.Header, now time.Time) *batcher.RateLimitInfo {
	rl := batcher.RateLimitInfo{RemainingRequests: -1, RemainingTokens: -1}
	given := false
	if d, ok := parseMillis(header(h, "Retry-After-Ms")); ok {
		rl.RetryAfter, given = d, true
	} else if d, ok := parseRetryAfter(header(h, "Retry-After"), now); ok {
		rl.RetryAfter, given = d, true
	}
	if n, ok := parseCount(header(h, "X-Ratelimit-Remaining-Requests")); ok {
		rl.RemainingRequests, given = n, true
	}
	if n, ok := parseCount(header(h, "X-Ratelimit-Remaining-Tokens")); ok {
		rl.RemainingTokens, given = n, true
	}
	if n, ok := parseCount(header(h, "X-Ratelimit-Limit-Requests")); ok {
		rl.LimitRequests, given = n, true
	}
	if n, ok := parseCount(header(h, "X-Ratelimit-Limit-Tokens")); ok {
		rl.LimitTokens, given = n, true
	}
	if d, ok := parseReset(header(h, "X-Ratelimit-Reset-Requests"), now); ok {
		rl.ResetRequests, given = d, true
	}
	if d, ok := parseReset(header(h, "X-Ratelimit-Reset-Tokens"), now); ok {
		rl.ResetTokens, given = d, true
	}
	if !given {
		return nil
	}
	return &rl
}

// header is h.Get(key) for a key already in canonical form: every call
// reads these headers, and Get would build each canonical key anew.
func header(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func parseMillis(s string) (time.Duration, bool) {
	if s == "" {
		return 0, false // absent: no error to build
	}
	ms, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(ms >= 0) {
		return 0, false
	}
	return capWait(ms * float64(time.Millisecond)), true
}

// parseRetryAfter reads RFC 9110's Retry-After: delay-seconds or an
// HTTP-date. Fractional seconds are accepted too.
func parseRetryAfter(s string, now time.Time) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if !(secs >= 0) {
			return 0, false
		}
		return capWait(secs * float64(time.Second)), true
	}
	t, err := http.ParseTime(s)
	if err != nil {
		return 0, false
	}
	return capWait(float64(max(t.Sub(now), 0))), true
}

func parseCount(s string) (int64, bool) {
	if s == "" {
		return 0, false // absent: no error to build
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// parseReset reads a reset time: a Go-style duration ("6m0s", "20ms",
// "1.5s"), bare seconds, or an RFC 3339 time.
func parseReset(s string, now time.Time) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return 0, false
		}
		return min(d, maxWait), true
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if !(secs >= 0) {
			return 0, false
		}
		return capWait(secs * float64(time.Second)), true
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return capWait(float64(max(t.Sub(now), 0))), true
	}
	return 0, false
}

// capWait converts nanoseconds to a duration no longer than maxWait.
func capWait(ns float64) time.Duration {
	if math.IsNaN(ns) || ns <= 0 {
		return 0
	}
	if ns >= float64(maxWait) {
		return maxWait
	}
	return time.Duration(ns)
}
