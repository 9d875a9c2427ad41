package llmsim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limits enforces RPM and TPM with token buckets that start full and refill
// continuously, and writes the x-ratelimit-* headers providers send.
type limits struct {
	now func() time.Time

	mu     sync.Mutex // makes taking from both buckets one step
	rpm    *rate.Limiter
	tpm    *rate.Limiter
	rpmMax int
	tpmMax int
}

func newLimits(rpm, tpm int, now func() time.Time) *limits {
	l := &limits{now: now, rpmMax: rpm, tpmMax: tpm}
	if rpm > 0 {
		l.rpm = rate.NewLimiter(rate.Limit(float64(rpm)/60), rpm)
	}
	if tpm > 0 {
		l.tpm = rate.NewLimiter(rate.Limit(float64(tpm)/60), tpm)
	}
	return l
}

// verdict is the outcome of take.
type verdict struct {
	ok         bool
	retryAfter time.Duration // when !ok: until the call would fit
	tooLarge   bool          // when !ok: the call costs more than the TPM
	reason     string        // "requests" or "tokens"
}

// take takes one request and tokens tokens from the buckets, or neither,
// and sets the rate-limit headers on h either way.
func (l *limits) take(tokens int, h http.Header) verdict {
	if l.rpm == nil && l.tpm == nil {
		return verdict{ok: true}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	v := verdict{ok: true}
	if l.rpm != nil {
		if avail := l.rpm.TokensAt(now); avail < 1 {
			v = verdict{retryAfter: wait(1-avail, l.rpm.Limit()), reason: "requests"}
		}
	}
	if l.tpm != nil {
		if tokens > l.tpmMax {
			v = verdict{tooLarge: true, reason: "tokens"}
		} else if avail := l.tpm.TokensAt(now); avail < float64(tokens) {
			if w := wait(float64(tokens)-avail, l.tpm.Limit()); !v.ok {
				v.retryAfter = max(v.retryAfter, w)
			} else {
				v = verdict{retryAfter: w, reason: "tokens"}
			}
		}
	}
	if v.ok {
		if l.rpm != nil {
			l.rpm.AllowN(now, 1)
		}
		if l.tpm != nil {
			l.tpm.AllowN(now, tokens)
		}
	}
	l.headersLocked(now, h)
	return v
}

func (l *limits) headersLocked(now time.Time, h http.Header) {
	set := func(kind string, lim *rate.Limiter, limit int) {
		avail := lim.TokensAt(now)
		h.Set("x-ratelimit-limit-"+kind, strconv.Itoa(limit))
		h.Set("x-ratelimit-remaining-"+kind, strconv.Itoa(int(math.Floor(max(avail, 0)))))
		h.Set("x-ratelimit-reset-"+kind, FormatReset(wait(float64(limit)-avail, lim.Limit())))
	}
	if l.rpm != nil {
		set("requests", l.rpm, l.rpmMax)
	}
	if l.tpm != nil {
		set("tokens", l.tpm, l.tpmMax)
	}
}

// wait returns how long a bucket refilling at r takes to gain n tokens.
func wait(n float64, r rate.Limit) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(n / float64(r) * float64(time.Second)))
}

// FormatReset writes a duration the way OpenAI's x-ratelimit-reset-*
// headers do: "1s", "6m0s", "20ms", rounded up to the millisecond.
func FormatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	d = (d + time.Millisecond - 1).Truncate(time.Millisecond)
	return d.String()
}

// retryAfterHeaders sets Retry-After (whole seconds, rounded up) and
// retry-after-ms.
func retryAfterHeaders(h http.Header, d time.Duration) {
	secs := int64(math.Ceil(d.Seconds()))
	h.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	h.Set("retry-after-ms", strconv.FormatInt(max(int64(math.Ceil(float64(d)/float64(time.Millisecond))), 1), 10))
}

// limited books a's cost against the rate limits and, when it is over
// them, answers as the provider does (429 and its headers) and returns
// true.
func (s *Server) limited(w http.ResponseWriter, r *http.Request, a *answer) bool {
	h := w.Header()
	v := verdict{ok: true}
	if r.Context().Value(batchCallKey{}) == nil { // an Anthropic batch's calls are outside the limits
		v = s.lim.take(a.cost, h)
	}
	if a.anthropic != nil {
		if !v.ok && !v.tooLarge {
			retryAfterHeaders(h, v.retryAfter)
		}
		anthropicHeaders(h, s.cfg.Now())
		if !v.ok {
			s.st.rateLimited.Add(1)
			s.cfg.Logger.Debug("rate limited", "path", r.URL.Path, "reason", v.reason, "retry_after", v.retryAfter)
			anthropicRateLimited(w, v, a.cost, s.cfg.TPM)
			return true
		}
	}
	if !v.ok {
		s.st.rateLimited.Add(1)
		if v.tooLarge {
			writeError(w, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded",
				fmt.Sprintf("Request too large: limit %d tokens per min, requested %d.", s.cfg.TPM, a.cost))
			return true
		}
		retryAfterHeaders(h, v.retryAfter)
		s.cfg.Logger.Debug("rate limited", "path", r.URL.Path, "reason", v.reason, "retry_after", v.retryAfter)
		writeError(w, http.StatusTooManyRequests, v.reason, "rate_limit_exceeded",
			fmt.Sprintf("Rate limit reached for %s per min. Please try again in %s.", v.reason, FormatReset(v.retryAfter)))
		return true
	}
	return false
}
