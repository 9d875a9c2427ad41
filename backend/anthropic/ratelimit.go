package anthropic

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

// ParseRateLimit reads what an answer's headers say about Anthropic's
// limits, as backend/openai's ParseRateLimit reads x-ratelimit-*:
// retry-after (seconds or an HTTP date), and
// anthropic-ratelimit-requests-{limit,remaining,reset} and
// anthropic-ratelimit-tokens-{limit,remaining,reset}, whose reset is an
// RFC 3339 time (when the bucket is full again). Where the combined tokens
// headers are absent, the input-tokens ones stand for them (they are what
// a request's estimate spends first). It returns nil when none is given;
// values it cannot read count as not given.
func ParseRateLimit(h http.Header, now time.Time) *batcher.RateLimitInfo {
	rl := batcher.RateLimitInfo{RemainingRequests: -1, RemainingTokens: -1}
	given := false
	if d, ok := parseRetryAfter(h.Get("retry-after"), now); ok {
		rl.RetryAfter, given = d, true
	}
	const p = "anthropic-ratelimit-"
	if n, ok := parseCount(h.Get(p + "requests-remaining")); ok {
		rl.RemainingRequests, given = n, true
	}
	if n, ok := parseCount(h.Get(p + "requests-limit")); ok {
		rl.LimitRequests, given = n, true
	}
	if d, ok := parseReset(h.Get(p+"requests-reset"), now); ok {
		rl.ResetRequests, given = d, true
	}
	tokens := p + "tokens-"
	if h.Get(tokens+"remaining") == "" && h.Get(tokens+"limit") == "" {
		tokens = p + "input-tokens-"
	}
	if n, ok := parseCount(h.Get(tokens + "remaining")); ok {
		rl.RemainingTokens, given = n, true
	}
	if n, ok := parseCount(h.Get(tokens + "limit")); ok {
		rl.LimitTokens, given = n, true
	}
	if d, ok := parseReset(h.Get(tokens+"reset"), now); ok {
		rl.ResetTokens, given = d, true
	}
	if !given {
		return nil
	}
	return &rl
}

// parseRetryAfter reads RFC 9110's Retry-After: delay-seconds (fractions
// accepted) or an HTTP-date.
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
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// parseReset reads a reset time: RFC 3339 (Anthropic's), or, leniently,
// a Go duration or bare seconds.
func parseReset(s string, now time.Time) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return capWait(float64(max(t.Sub(now), 0))), true
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return 0, false
		}
		return min(d, maxWait), true
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil && secs >= 0 {
		return capWait(secs * float64(time.Second)), true
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
