package batcher

import (
	"math"
	"math/bits"
	"time"
)

// A batch run that delivers its plain calls (batchRun.deliver) records
// their two histograms (a request's duration and queue wait) by hand
// once for the batch, not once a call: it adds each call's measurements
// up in a tally of its own, without atomics, and adds the tally to the
// series' histogram before it wakes any of the batch's callers. A batch's
// calls share a route and mostly a priority and an outcome, so its
// hundred measurements go into two or three series and a few buckets
// each: at 512 producers, four atomic adds a call on histogram lines that
// every dispatch worker writes were about 4% of the CPU an item.

// maxTallies is how many series a run tallies; a measurement of another
// series goes to its histogram at once.
const maxTallies = 4

// tally is one series' measurements in one batch, not yet in its
// histogram.
type tally struct {
	s       *series
	n       int
	last    int // the bucket of the last measurement, where the next one most likely goes
	counts  [maxBuckets]uint64
	sum     int64
	lo, hi  int64
	touched uint32 // bit i: counts[i] is not 0
}

// add counts v (kindSeconds or kindInt) in t.
func (t *tally) add(v int64) {
	b := t.s.inst.def.intBounds
	i := t.last
	if (i < len(b) && v > b[i]) || (i > 0 && v <= b[i-1]) {
		i = bucketOf(b, v)
		t.last = i
	}
	t.counts[i]++
	t.touched |= 1 << i
	t.n++
	t.sum += v
	t.lo, t.hi = min(t.lo, v), max(t.hi, v)
}

// flush adds t to its series' histogram and empties it.
func (t *tally) flush() {
	h := t.s.hand()
	for m := t.touched; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		h.counts[i].Add(t.counts[i])
	}
	h.sum.Add(t.sum)
	h.lower(t.lo)
	h.raise(t.hi)
	*t = tally{}
}

// tallies are a run's tallies (batchRun.tallies).
type tallies struct {
	t [maxTallies]tally
	n int
}

// record counts d in s's tally, or in s's histogram when the run tallies
// maxTallies other series already.
func (ts *tallies) record(s *series, d time.Duration) {
	for i := range ts.n {
		if t := &ts.t[i]; t.s == s {
			t.add(int64(d))
			return
		}
	}
	if ts.n == maxTallies {
		s.seconds(d)
		return
	}
	t := &ts.t[ts.n]
	ts.n++
	t.s, t.lo, t.hi = s, math.MaxInt64, math.MinInt64
	t.add(int64(d))
}

// flush adds every tally to its histogram.
func (ts *tallies) flush() {
	for i := range ts.n {
		ts.t[i].flush()
	}
	ts.n = 0
}

// finishedBy is metrics.finished for a plain call the run r delivers
// (batchRun.deliver): with a MetricsProducer its histograms are tallied
// for the batch, which flushTallies adds before any caller wakes.
func (m *metrics) finishedBy(r *batchRun, c *Call, res *Result) {
	if m == nil {
		return
	}
	if !m.byHand {
		m.finished(c, res)
		return
	}
	rm, p := c.rc.metrics, c.prio
	if r.tallies == nil {
		r.tallies = new(tallies)
	}
	r.tallies.record(&rm.durations[p][outcomeOf(res.Err)], res.Timings.Total)
	if res.Timings.Queued > 0 {
		r.tallies.record(&rm.queueWaits[p], res.Timings.Queued)
	}
}
