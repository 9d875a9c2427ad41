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
	// lag and the recent takes, for stale headers.
	lag   time.Duration
	takes []take
}

// take is one call's booking, kept for HeaderLag.
type take struct {
	at             time.Time
	requests, toks int
}

func newLimits(c *Config) *limits {
	l := &limits{rpmLimit: c.RPM, tpmLimit: c.TPM, lag: c.HeaderLag}
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
	if l.lag > 0 {
		l.takes = append(l.takes, take{at: now, requests: 1, toks: tokens})
	}
	return nil
}

// lagged returns what the buckets held lag before now, as far as the calls
// taken since tell: the takes since then are given back, the refill since
// then taken away.
func (l *limits) lagged(now time.Time) (requests, tokens float64) {
	i := 0
	for i < len(l.takes) && now.Sub(l.takes[i].at) > l.lag {
		i++
	}
	l.takes = l.takes[i:]
	for _, t := range l.takes {
		requests += float64(t.requests)
		tokens += float64(t.toks)
	}
	secs := l.lag.Seconds()
	if l.rpm != nil {
		requests -= float64(l.rpm.Limit()) * secs
	}
	if l.tpm != nil {
		tokens -= float64(l.tpm.Limit()) * secs
	}
	return requests, tokens
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
	var backReq, backTok float64
	if l.lag > 0 {
		backReq, backTok = l.lagged(now)
	}
	if l.rpm != nil {
		burst := float64(l.rpm.Burst())
		tok := min(max(l.rpm.TokensAt(now)+backReq, 0), burst)
		info.LimitRequests = int64(l.rpm.Burst())
		info.RemainingRequests = int64(math.Max(0, math.Floor(tok)))
		info.ResetRequests = refill(l.rpm, burst-tok)
	}
	if l.tpm != nil {
		burst := float64(l.tpm.Burst())
		tok := min(max(l.tpm.TokensAt(now)+backTok, 0), burst)
		info.LimitTokens = int64(l.tpm.Burst())
		info.RemainingTokens = int64(math.Max(0, math.Floor(tok)))
		info.ResetTokens = refill(l.tpm, burst-tok)
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
