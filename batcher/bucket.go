package batcher

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// perSecond is a bucket's default burst: one second's worth of a per-minute
// limit, until the upstream's headers say more (see bucket.learnBurst).
func perSecond(perMinute int) int { return max(1, perMinute/60) }

// bucket is one rate budget (requests or tokens per minute): a
// rate.Limiter, configured or learned from the upstream's headers.
//
// rate.Limiter has no partial refund: Reservation.CancelAt restores a whole
// reservation, and only before it acts. A permit whose reservation has not
// acted yet is cancelled that way; tokens given back after that (a batch
// cut smaller than its permit, a reply that used fewer tokens than
// reserved, an upstream that says it has more left than we thought) go to
// credit, which the next reservations draw on first. Credit never lifts
// the bucket past its burst: what the limiter holds plus the credit is
// capped at the burst whenever either is read. A reply that used more
// tokens than reserved is charged the rest when its permit ends, into
// debt: the next reservations wait for it.
type bucket struct {
	lim        *rate.Limiter // nil: no limit known (yet)
	perMinute  int           // the configured rate; 0: learned from headers
	learnBurst bool          // the burst was not configured: follow the upstream's limit header
	credit     float64
	spent      uint64 // tokens taken so far, to tell what was spent after a grant
	// share is the part of the budget this replica holds alone (1 but while
	// a fleet's store is unreachable); the limiter holds share of the rate
	// and of baseBurst, the burst configured or learned.
	share     float64
	baseBurst int
}

func newBucket(perMinute, burst int, burstSet bool) bucket {
	b := bucket{perMinute: perMinute, learnBurst: !burstSet, share: 1, baseBurst: burst}
	if perMinute > 0 {
		b.lim = rate.NewLimiter(rate.Limit(float64(perMinute)/60), burst)
	}
	return b
}

// shareOf returns f of n, at least 1.
func shareOf(n int, f float64) int { return max(1, int(math.Round(float64(n)*f))) }

// setShare scales the bucket to f of the budget.
func (b *bucket) setShare(now time.Time, f float64) {
	old := b.share
	b.share = f
	if b.lim == nil || old == f {
		return
	}
	b.lim.SetLimitAt(now, b.lim.Limit()*rate.Limit(f/old))
	b.lim.SetBurstAt(now, shareOf(b.baseBurst, f))
	b.tokensAt(now) // caps the credit
}

// rate returns the whole budget (not this replica's share), for the fleet.
func (b *bucket) rate() Rate {
	if b.lim == nil {
		return Rate{}
	}
	if b.perMinute > 0 {
		return Rate{PerMinute: float64(b.perMinute), Burst: b.baseBurst, Adaptive: true}
	}
	return Rate{PerMinute: float64(b.lim.Limit()) * 60 / b.share, Burst: b.baseBurst}
}

// tokensAt returns what the bucket holds at now, credit included.
func (b *bucket) tokensAt(now time.Time) float64 {
	have := b.lim.TokensAt(now)
	b.credit = max(0, min(b.credit, float64(b.lim.Burst())-have))
	return have + b.credit
}

// waitFor reports whether need must wait, and how long, when share of the
// burst must stay in the bucket. onlyShare says that it would not wait
// without the share.
func (b *bucket) waitFor(now time.Time, need int, share float64) (time.Duration, bool, bool) {
	if b.lim == nil || need <= 0 {
		return 0, false, false
	}
	// A batch larger than the bucket waits for a full bucket (less the
	// share), then goes into debt.
	burst := b.lim.Burst()
	reserve := math.Floor(float64(burst) * share)
	want := min(float64(need), float64(burst)-reserve) + reserve
	have := b.tokensAt(now)
	if have >= want {
		return 0, false, false
	}
	d := time.Duration((want - have) / float64(b.lim.Limit()) * float64(time.Second))
	return d, true, have >= min(float64(need), float64(burst))
}

// take reserves n tokens at now: credit first, then the limiter (into debt
// past its burst).
func (b *bucket) take(now time.Time, n int) *reservation {
	if b.lim == nil {
		return nil
	}
	return &reservation{taken: n, at: now, r: b.charge(now, n)}
}

// charge spends n tokens at now: credit first, then the limiter (into debt
// past its burst). It returns the limiter's first reservation, if any.
func (b *bucket) charge(now time.Time, n int) *rate.Reservation {
	b.spent += uint64(max(n, 0))
	b.tokensAt(now) // caps the credit
	fromCredit := math.Floor(min(float64(n), b.credit))
	b.credit -= fromCredit
	rest := n - int(fromCredit)
	burst := b.lim.Burst()
	var first *rate.Reservation
	for ; rest > 0; rest -= burst {
		r := b.lim.ReserveN(now, min(rest, burst))
		if first == nil {
			first = r
		}
	}
	return first
}

// refund settles res against used, what the call spent: it gives back
// what res took beyond used, and charges what used took beyond res (a
// reply longer than its estimate), into debt, so that the budget counts
// what the upstream will.
func (b *bucket) refund(now time.Time, res *reservation, used int) {
	if b.lim == nil || res == nil || used == res.taken {
		return
	}
	if used > res.taken {
		b.charge(now, used-res.taken)
		res.taken = used
		return
	}
	back := res.taken - max(used, 0)
	if used <= 0 && res.r != nil && res.taken <= b.lim.Burst() && !now.After(res.at.Add(res.r.DelayFrom(res.at))) {
		// Not acted yet: the documented cancel restores it.
		res.r.CancelAt(now)
		res.r = nil
		res.taken = 0
		return
	}
	b.credit += float64(back)
	b.tokensAt(now) // caps it
}

// observation is what one header set told a bucket.
type observation struct {
	grew  bool          // the budget grew: waiters may go
	pause time.Duration // no rate known and nothing left: pause this long
}

// observe follows the upstream's limit, remaining count and reset (time
// until full again) for this budget. spentAt is the bucket's spend counter
// right after the call was granted: what was spent since then, the
// upstream had not counted yet when it answered.
//
// Without a configured rate it learns one: limit, remaining and reset give
// the refill rate ((limit - remaining) / reset) and the burst (limit). It
// then holds what the upstream says is left, less what we spent since, so
// that an exhausted upstream costs only the wait for the next batch's
// tokens, never the whole reset. With a configured rate, the bucket drains
// to what the upstream says is left, and its burst follows the limit header
// when no burst was configured. A bucket is lifted to the upstream's figure
// only when it was just learned or found larger: stale headers cannot lift
// it.
func (b *bucket) observe(now time.Time, limit, remaining int64, reset time.Duration, spentAt uint64) observation {
	var o observation
	if remaining < 0 {
		return o
	}
	if b.perMinute == 0 && limit <= 0 {
		if remaining == 0 && reset > 0 {
			o.pause = min(reset, unknownLimitPause)
		}
		return o
	}
	if b.perMinute == 0 {
		r := float64(limit) / 60 // OpenAI's limits are per minute
		if reset > 0 && limit > remaining {
			r = float64(limit-remaining) / reset.Seconds()
		}
		r = min(max(r, float64(limit)/3600), float64(limit)) * b.share
		if b.lim == nil {
			b.lim = rate.NewLimiter(rate.Limit(r), shareOf(int(limit), b.share))
			b.baseBurst = int(limit)
			o.grew = true
		} else {
			b.lim.SetLimitAt(now, rate.Limit(r))
		}
	}
	if b.learnBurst && limit > 0 && int(limit) != b.baseBurst {
		if int(limit) > b.baseBurst {
			o.grew = true
		}
		b.baseBurst = int(limit)
		b.lim.SetBurstAt(now, shareOf(b.baseBurst, b.share))
	}
	since := float64(b.spent - min(spentAt, b.spent))
	target := float64(remaining) - since
	have := b.tokensAt(now)
	switch {
	case have > target+0.5:
		b.drainLocked(now, have, target)
	case target > have+0.5 && o.grew:
		// The bucket was just learned, or found larger than assumed: take
		// what the upstream says is left. Otherwise the bucket only ever
		// drains to the upstream's figure and refills at its own rate, so
		// that stale headers (counters that lag) cannot lift it.
		b.credit += target - have
		b.tokensAt(now)
		o.grew = true
	}
	return o
}

// drainLocked takes the bucket down from have to target (at least 0): a
// reservation taken and never given back.
func (b *bucket) drainLocked(now time.Time, have, target float64) {
	n := math.Ceil(have - max(target, 0))
	c := min(b.credit, n)
	b.credit -= c
	for rest, burst := int(n-c), b.lim.Burst(); rest > 0; rest -= burst {
		b.lim.ReserveN(now, min(rest, burst))
	}
}

// follow sets the bucket to what the fleet's has left (remaining, read
// when the permit whose spend counter was spentAt was booked), less what
// this replica granted since, within its burst. It reports whether the
// bucket grew.
func (b *bucket) follow(now time.Time, remaining float64, spentAt uint64) bool {
	if b.lim == nil || math.IsInf(remaining, 0) || math.IsNaN(remaining) {
		return false
	}
	target := remaining - float64(b.spent-min(spentAt, b.spent))
	have := b.tokensAt(now)
	switch {
	case have > target+0.5:
		b.drainLocked(now, have, target)
	case target > have+0.5:
		b.credit += target - have
		return b.tokensAt(now) > have+0.5 // capped at the burst
	}
	return false
}

// lower halves a configured rate within its floor.
func (b *bucket) lower(now time.Time) {
	if b.lim == nil || b.perMinute == 0 {
		return
	}
	floor := rate.Limit(float64(b.perMinute) / 60 * adaptFloor * b.share)
	b.lim.SetLimitAt(now, max(b.lim.Limit()/2, floor))
}

// raise climbs a configured rate back by a step.
func (b *bucket) raise(now time.Time) {
	if b.lim == nil || b.perMinute == 0 {
		return
	}
	ceil := rate.Limit(float64(b.perMinute) / 60 * b.share)
	if b.lim.Limit() < ceil {
		b.lim.SetLimitAt(now, min(b.lim.Limit()+ceil*adaptStep, ceil))
	}
}

// perMinuteRate returns the bucket's current rate per minute, 0 when none.
func (b *bucket) perMinuteRate() float64 {
	if b.lim == nil {
		return 0
	}
	return float64(b.lim.Limit()) * 60
}
