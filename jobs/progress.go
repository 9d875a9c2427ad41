package jobs

import (
	"sync"
	"time"
)

// DefaultRateWindow is the moving window over which rates and the ETA are
// measured.
const DefaultRateWindow = 30 * time.Second

// Progress is a job's state, counts and rates.
type Progress struct {
	ID          string
	State       State
	Counts      Counts
	Groups      map[string]Counts
	SuccessRate float64 // succeeded over ended, 0 to 1
	TokensIn    int64
	TokensOut   int64
	// Cost is what the job cost so far in USD; Saving what it saved
	// against online dispatch of the same tokens.
	Cost       float64
	Saving     float64
	TokensPerS float64
	ItemsPerH  float64
	Elapsed    time.Duration
	// ETA is the time left at the window's completion rate, or, while
	// items wait in upstream batches, at least what the provider's progress
	// says; negative while unknown.
	ETA  time.Duration
	Time time.Time
	// Upstream is the job's batch-API dispatch; nil when it has none.
	Upstream *UpstreamProgress
}

// UpstreamProgress is a job's provider batches at their last look.
type UpstreamProgress struct {
	// Items are the tasks in upstream batches that have not come back.
	Items int64
	// Batches counts the upstream batches by the provider's status
	// (batchapi.Status); "preparing" before one is created.
	Batches map[string]int64
	// ETA is when the provider's progress says the last running batch
	// ends, from now; negative while unknown.
	ETA time.Duration
}

// upstreamProgress sums a job's chunks as they were at their last look.
func upstreamProgress(chunks []Chunk, now time.Time) *UpstreamProgress {
	if len(chunks) == 0 {
		return nil
	}
	u := &UpstreamProgress{Batches: map[string]int64{}, ETA: -1}
	unknown := false
	for i := range chunks {
		c := &chunks[i]
		status := c.Status
		if status == "" {
			status = "preparing"
		}
		u.Batches[status]++
		if c.Step != StepRunning {
			continue
		}
		u.Items += int64(len(c.Seqs))
		if c.ETA.IsZero() {
			unknown = true
		} else {
			u.ETA = max(u.ETA, max(c.ETA.Sub(now), 0))
		}
	}
	if unknown {
		u.ETA = -1 // the last batch's end is not known while one's is not
	}
	return u
}

// rateTracker keeps a job's recent (time, ended, tokens) samples.
type rateTracker struct {
	mu      sync.Mutex
	window  time.Duration
	samples []sample // oldest first, within the window plus one
}

type sample struct {
	at     time.Time
	ended  int64
	tokens int64
}

func (r *rateTracker) observe(now time.Time, ended, tokens int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.samples); n > 0 && now.Sub(r.samples[n-1].at) < 100*time.Millisecond {
		r.samples[n-1] = sample{now, ended, tokens}
		return
	}
	r.samples = append(r.samples, sample{now, ended, tokens})
	// Keep one sample older than the window, so that the window is full.
	i := 0
	for i+1 < len(r.samples) && now.Sub(r.samples[i+1].at) >= r.window {
		i++
	}
	r.samples = r.samples[i:]
}

// rates returns ended and tokens per second over the window.
func (r *rateTracker) rates() (endedPerS, tokensPerS float64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) < 2 {
		return 0, 0, false
	}
	a, b := r.samples[0], r.samples[len(r.samples)-1]
	dt := b.at.Sub(a.at).Seconds()
	if dt < 0.5 {
		return 0, 0, false
	}
	return float64(b.ended-a.ended) / dt, float64(b.tokens-a.tokens) / dt, true
}

// progressOf computes a job's progress, feeding tr with its counts.
func progressOf(j *Job, tr *rateTracker, now time.Time) Progress {
	p := Progress{ID: j.ID, State: j.State, Counts: j.Counts, TokensIn: j.TokensIn, TokensOut: j.TokensOut, Cost: j.Cost, Saving: j.Saving(), ETA: -1, Time: now}
	for g, c := range j.Groups {
		if name := j.GroupName(g); name != "" {
			if p.Groups == nil {
				p.Groups = map[string]Counts{}
			}
			p.Groups[name] = c
		}
	}
	ended := j.Counts.Ended()
	if ended > 0 {
		p.SuccessRate = float64(j.Counts.Succeeded) / float64(ended)
	}
	switch {
	case !j.EndedAt.IsZero() && !j.StartedAt.IsZero():
		p.Elapsed = j.EndedAt.Sub(j.StartedAt)
	case !j.StartedAt.IsZero():
		p.Elapsed = now.Sub(j.StartedAt)
	}
	if j.State.Terminal() {
		p.ETA = 0
		if s := p.Elapsed.Seconds(); s > 0 {
			// The items that ran to an outcome of their own: those a
			// cancel or an expiry ended were not processed, and counting
			// them gave a job cancelled after 39 of 400 items 132 items/s.
			ran := j.Counts.Succeeded + j.Counts.Failed
			p.ItemsPerH = float64(ran) / s * 3600
			p.TokensPerS = float64(j.TokensIn+j.TokensOut) / s
		}
		return p
	}
	if j.Counts.Total > 0 && ended >= j.Counts.Total {
		// Every item has ended (the job finalizing, or about to): nothing
		// is left to wait for, whatever the rate, which a window with no
		// item ended in it reads as 0 (an ETA of "unknown" once shown
		// beside "20/20 done").
		p.ETA = 0
	}
	if tr == nil {
		return p
	}
	tokens := j.TokensIn + j.TokensOut
	// The rate counts the items that ran to an outcome of their own, as a
	// terminal job's does: a cancel ends the pending items in bulk, which
	// read as thousands of items a second while cancelling.
	ran := j.Counts.Succeeded + j.Counts.Failed
	tr.observe(now, ran, tokens)
	perS, tokS, ok := tr.rates()
	if !ok {
		// The window has one sample on a job's first look (batcherctl
		// jobs get, the first line of jobs watch), which left the rate and
		// ETA unknown for a job that had ended half its items: until the
		// window fills, the rate is the job's average since it started.
		perS, tokS, ok = averageRates(p.Elapsed, ran, tokens)
	}
	if ok {
		p.ItemsPerH = perS * 3600
		p.TokensPerS = tokS
		// While cancelling, what is left ends at the cancel, not at the
		// rate (which gave a job cancelled early an ETA of hours): unknown.
		if left := j.Counts.Total - ended; perS > 0 && j.State != StateCancelling {
			p.ETA = time.Duration(float64(left) / perS * float64(time.Second))
		}
	}
	return p
}

// averageRates returns ended and tokens per second over a job's elapsed
// time, once it has run half a second (as the window needs) and ended an
// item: before that it has no rate to tell.
func averageRates(elapsed time.Duration, ended, tokens int64) (endedPerS, tokensPerS float64, ok bool) {
	s := elapsed.Seconds()
	if s < 0.5 || ended == 0 {
		return 0, 0, false
	}
	return float64(ended) / s, float64(tokens) / s, true
}
