package batcher

import (
	"sync/atomic"
)

// backendStats are one backend's counters. Every field is atomic: the hot
// path only adds.
type backendStats struct {
	calls        atomic.Int64 // upstream dispatches
	items        atomic.Int64 // requests carried
	rateLimited  atomic.Int64 // 429s (rate-limit errors) seen upstream
	waitConc     atomic.Int64
	waitRPM      atomic.Int64
	waitTPM      atomic.Int64
	waitPause    atomic.Int64
	retries      [len(classNames)]atomic.Int64
	breakerOpen  atomic.Int64
	breakerHalf  atomic.Int64
	breakerClose atomic.Int64
	fallbacks    atomic.Int64 // requests moved from this backend to a fallback
	budgetFails  atomic.Int64 // requests failed early: the budget could not meet their deadline
	dedupHits    atomic.Int64
	streaming    atomic.Int64 // streamed upstream calls open now (stream.go)
	streamed     atomic.Int64 // streamed upstream calls made
	pauses       atomic.Int64 // dispatch pauses (Retry-After, exhausted budgets)
}

func (s *backendStats) waited(budget string) {
	switch budget {
	case budgetRPM:
		s.waitRPM.Add(1)
	case budgetTPM:
		s.waitTPM.Add(1)
	case budgetPause:
		s.waitPause.Add(1)
	default:
		s.waitConc.Add(1)
	}
}

func (s *backendStats) breakerChanged(_, to BreakerState) {
	switch to {
	case BreakerOpen:
		s.breakerOpen.Add(1)
	case BreakerHalfOpen:
		s.breakerHalf.Add(1)
	default:
		s.breakerClose.Add(1)
	}
}

// BackendStats is a snapshot of one backend's counters, for metrics.
type BackendStats struct {
	Name string
	// Calls made upstream and the requests they carried.
	Calls, Items int64
	// RateLimited counts 429s (rate-limit errors) seen upstream.
	RateLimited int64
	// Waits counts how often a batch had to wait, by budget: "concurrency",
	// "rpm", "tpm", "rate_limit_pause".
	Waits map[string]int64
	// Retries counts retries by error class.
	Retries map[string]int64
	// BreakerTransitions counts breaker state changes by the state entered.
	BreakerTransitions map[string]int64
	Breaker            BreakerState
	// Fallbacks counts requests moved from this backend to a fallback.
	Fallbacks int64
	// BudgetFailures counts requests failed early because the budget could
	// not meet their deadline.
	BudgetFailures int64
	// DedupHits counts requests that shared another's upstream call.
	DedupHits int64
	// Streaming is the streamed requests whose upstream call is open now;
	// Streamed counts the streamed upstream calls made.
	Streaming int
	Streamed  int64
	// InFlight and Limit are the permits out and the current (adaptive)
	// concurrency limit; RPM and TPM the current (adaptive) rates.
	InFlight, Limit int
	RPM, TPM        float64
	// Borrowed is how many protected slots background work holds now (lent
	// while no URGENT or HIGH work waited).
	Borrowed int
	// RPMBurst and TPMBurst are the buckets' sizes now (configured, or
	// learned from the upstream's limit headers); 0 without a budget.
	RPMBurst, TPMBurst int
	// Pauses counts dispatch pauses: Retry-After, or an exhausted budget
	// whose rate could not be learned.
	Pauses int64
}

// Stats returns every backend's counters.
func (b *Batcher) Stats() []BackendStats {
	set := b.backends.Load()
	out := make([]BackendStats, 0, len(set.list))
	for _, be := range set.list {
		s := be.stats
		st := BackendStats{
			Name:        be.name,
			Calls:       s.calls.Load(),
			Items:       s.items.Load(),
			RateLimited: s.rateLimited.Load(),
			Waits: map[string]int64{
				budgetConcurrency: s.waitConc.Load(), budgetRPM: s.waitRPM.Load(),
				budgetTPM: s.waitTPM.Load(), budgetPause: s.waitPause.Load(),
			},
			Retries: make(map[string]int64),
			BreakerTransitions: map[string]int64{
				BreakerOpen.String(): s.breakerOpen.Load(), BreakerHalfOpen.String(): s.breakerHalf.Load(),
				BreakerClosed.String(): s.breakerClose.Load(),
			},
			Breaker:        breakerState(be.brk.State()),
			Fallbacks:      s.fallbacks.Load(),
			BudgetFailures: s.budgetFails.Load(),
			DedupHits:      s.dedupHits.Load(),
			Streaming:      int(s.streaming.Load()),
			Streamed:       s.streamed.Load(),
		}
		for c := range s.retries {
			if n := s.retries[c].Load(); n > 0 {
				st.Retries[ErrorClass(c).String()] = n
			}
		}
		st.Pauses = s.pauses.Load()
		v := be.view()
		st.InFlight, st.Limit, st.Borrowed = v.inFlight, v.limit, v.borrowed
		st.RPM, st.TPM, st.RPMBurst, st.TPMBurst = v.rpm, v.tpm, v.rpmBurst, v.tpmBurst
		out = append(out, st)
	}
	return out
}
