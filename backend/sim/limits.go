package sim

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/batcherhq/batcher/batcher"
)

// limits holds the RPM and TPM buckets. A call takes from both or from
// neither: mu makes the check and the take one step.
type limits struct {
	mu  sync.Mutex
	rpm *rate.Limiter // nil: no request limit
	tpm *rate.Limiter // nil: no token limit
	// For messages: the configured per-minute limits.
	rpmLimit, tpmLimit int
}

func newLimits(c *Config) *limits {
	l := &limits{rpmLimit: c.RPM, tpmLimit: c.TPM}
	if c.RPM > 0 {
		burst := c.RPMBurst
		if burst == 0 {
			burst = (c.RPM + 59) / 60
		}
		l.rpm = rate.NewLimiter(rate.Limit(float64(c.RPM)/60), burst)
	}
	if c.TPM > 0 {
		burst := c.TPMBurst
		if burst == 0 {
			burst = c.TPM
		}
		l.tpm = rate.NewLimiter(rate.Limit(float64(c.TPM)/60), burst)
	}
	return l
}

// take books one request of the given tokens at now, or returns the error a
// provider would answer: 429 with a retry-after when a bucket is short, 413
// when the call can never fit the token bucket.
func (l *limits) take(now time.Time, tokens int) error {
	if l.rpm == nil && l.tpm == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tpm != nil && tokens > l.tpm.Burst() {
		return &batcher.UpstreamError{
			Class:      batcher.ClassInvalidRequest,
			StatusCode: http.StatusRequestEntityTooLarge,
			Message:    fmt.Sprintf("request too large: %d tokens exceed the token bucket of %d (limit %d per minute)", tokens, l.tpm.Burst(), l.tpmLimit),
		}
	}
	var wait time.Duration
	var which string
	if l.rpm != nil {
		if w := shortfall(l.rpm, now, 1); w > 0 {
			wait, which = w, fmt.Sprintf("requests: limit %d per minute", l.rpmLimit)
		}
	}
	if l.tpm != nil {
		if w := shortfall(l.tpm, now, tokens); w > 0 {
			if w > wait {
				wait = w
			}
			if which != "" {
				which += "; "
			}
			which += fmt.Sprintf("tokens: limit %d per minute, asked %d", l.tpmLimit, tokens)
		}
	}
	if wait > 0 {
		info := l.infoLocked(now)
		info.RetryAfter = wait
		return &batcher.UpstreamError{
			Class:      batcher.ClassRateLimit,
			StatusCode: http.StatusTooManyRequests,
			Message:    "rate limit reached for " + which,
			RateLimit:  info,
		}
	}
	if l.rpm != nil {
		l.rpm.AllowN(now, 1)
	}
	if l.tpm != nil {
		l.tpm.AllowN(now, tokens)
	}
	return nil
}

// info reports the buckets' state at now, as x-ratelimit-* headers would.
func (l *limits) info(now time.Time) *batcher.RateLimitInfo {
	if l.rpm == nil && l.tpm == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.infoLocked(now)
}

func (l *limits) infoLocked(now time.Time) *batcher.RateLimitInfo {
	info := &batcher.RateLimitInfo{RemainingRequests: -1, RemainingTokens: -1}
	if l.rpm != nil {
		tok := l.rpm.TokensAt(now)
		info.RemainingRequests = int64(math.Max(0, math.Floor(tok)))
		info.ResetRequests = refill(l.rpm, float64(l.rpm.Burst())-tok)
	}
	if l.tpm != nil {
		tok := l.tpm.TokensAt(now)
		info.RemainingTokens = int64(math.Max(0, math.Floor(tok)))
		info.ResetTokens = refill(l.tpm, float64(l.tpm.Burst())-tok)
	}
	return info
}

// shortfall returns how long until lim holds n tokens; 0 when it does now.
func shortfall(lim *rate.Limiter, now time.Time, n int) time.Duration {
	return refill(lim, float64(n)-lim.TokensAt(now))
}

// refill returns how long lim takes to gain missing tokens, rounded up to a
// millisecond so that a caller who waits it out finds them there.
func refill(lim *rate.Limiter, missing float64) time.Duration {
	if missing <= 0 {
		return 0
	}
	d := time.Duration(math.Ceil(missing / float64(lim.Limit()) * float64(time.Second)))
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}
