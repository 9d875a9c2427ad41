package jobs

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// pacer holds a run's own limits on starting tasks, on top of the core's
// per-backend limits: each run group's delay between two of its runs, and
// the job's requests and tokens per minute. The run's loop owns it.
//
// Bursts: a group's delay allows one start at a time; requests and tokens
// per minute allow a second's worth at once. A request estimated above a
// second's tokens is charged a second's worth when it starts (so that it
// can start at all), and the rest of what it used when it ends.
type pacer struct {
	groups []*rate.Limiter // by group index; nil: no delay
	rpm    *rate.Limiter   // nil: no limit
	tpm    *rate.Limiter   // nil: no limit
}

func newPacer(s *Spec) *pacer {
	p := &pacer{}
	for i, g := range s.Groups {
		if g.Delay > 0 {
			if p.groups == nil {
				p.groups = make([]*rate.Limiter, len(s.Groups))
			}
			p.groups[i] = rate.NewLimiter(rate.Every(g.Delay), 1)
		}
	}
	if s.RPM > 0 {
		p.rpm = rate.NewLimiter(rate.Limit(float64(s.RPM)/60), int(math.Ceil(float64(s.RPM)/60)))
	}
	if s.TPM > 0 {
		p.tpm = rate.NewLimiter(rate.Limit(float64(s.TPM)/60), int(max(1, min(s.TPM/60, math.MaxInt32))))
	}
	return p
}

// admit takes what a start of a task of group g costing tokens needs, from
// every limit at once, and returns the tokens it charged and 0; or, when
// one of them lacks it, takes nothing and returns how long to wait before
// trying again.
func (p *pacer) admit(g int, tokens int, now time.Time) (int, time.Duration) {
	var lims [3]*rate.Limiter
	var ns [3]int
	k := 0
	if g >= 0 && g < len(p.groups) && p.groups[g] != nil {
		lims[k], ns[k] = p.groups[g], 1
		k++
	}
	if p.rpm != nil {
		lims[k], ns[k] = p.rpm, 1
		k++
	}
	if p.tpm != nil {
		lims[k], ns[k] = p.tpm, min(max(tokens, 1), p.tpm.Burst())
		k++
	}
	var wait time.Duration
	for i := range k {
		if d := need(lims[i], ns[i], now); d > wait {
			wait = d
		}
	}
	if wait > 0 {
		return 0, wait
	}
	for i := range k {
		lims[i].AllowN(now, ns[i])
	}
	if p.tpm != nil {
		return ns[k-1], 0
	}
	return 0, 0
}

// need is how long until l holds n tokens (0: it holds them now).
func need(l *rate.Limiter, n int, now time.Time) time.Duration {
	lack := float64(n) - l.TokensAt(now)
	if lack <= 0 {
		return 0
	}
	return max(time.Duration(lack/float64(l.Limit())*float64(time.Second)), time.Millisecond)
}

// used charges the tokens a finished task used beyond what admit charged
// to the job's tokens per minute: the next starts wait for them.
func (p *pacer) used(extra int, now time.Time) {
	if p.tpm == nil || extra <= 0 {
		return
	}
	p.tpm.ReserveN(now, min(extra, p.tpm.Burst()))
}

// limited reports whether the pacer holds any limit.
func (p *pacer) limited() bool { return p.groups != nil || p.rpm != nil || p.tpm != nil }
