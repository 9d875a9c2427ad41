package batcher

import (
	"context"
	"time"
)

// Coordinator shares each backend's budgets, and what the backends learn of
// their upstreams, with the other replicas of a fleet: several Batchers in
// several processes that spend one provider's limits between them. Package
// fleet implements it over Redis. Without one (the default) a Batcher holds
// its budgets alone, and none of this costs anything.
//
// The core keeps its own grant path (grant.go) as it is: priorities,
// protected share, local buckets. A coordinator adds two things. Each batch
// the local budget granted is also booked in the fleet's budget, by its
// dispatch worker, just before it goes upstream (SharedBudget.Acquire), and
// ended after (Ticket.Release). And the coordinator steers the local budget
// with what the fleet knows (LocalBudget): another replica's Retry-After
// pause, its open breaker, and a local share of every budget while the
// fleet's store is unreachable.
type Coordinator interface {
	// Budget is called by New once per backend, before any batch. local is
	// the backend's own budget; the SharedBudget returned gates each of its
	// batches.
	Budget(backend string, local LocalBudget) SharedBudget
}

// SharedBudget is one backend's budget as the fleet shares it.
//
// Contract:
//   - Acquire is called by a dispatch worker, with no lock held, once the
//     backend's own budget has granted the batch and before it goes
//     upstream. It books d in the fleet's budgets (a concurrency lease, the
//     requests and the tokens) and returns when the batch may go.
//   - Acquire fails only when ctx ends first (every call of the batch has
//     ended), or with an error wrapping ErrNoBackend when the fleet holds
//     the backend's breaker open; nothing stays booked then. It must not
//     fail because the fleet's store is unreachable: it then lets the batch
//     go on the local share.
//   - The worker calls the Ticket's Release exactly once, after the
//     upstream call, after the batch's results are delivered. Release must
//     not block for long.
//   - Acquire and Release are called concurrently, up to the backend's
//     concurrency limit.
type SharedBudget interface {
	Acquire(ctx context.Context, d Demand) (Ticket, error)
}

// Demand is what a batch asks of the fleet's budgets.
type Demand struct {
	Requests int // upstream requests it makes (RPM)
	Tokens   int // tokens it reserves (TPM): estimated prompt plus max_tokens
	// RPM and TPM are the budgets as this replica knows them (configured, or
	// learned from the upstream's headers); the zero Rate: none known.
	RPM, TPM Rate
	// MaxConcurrency is the backend's configured concurrency: the fleet's
	// slots.
	MaxConcurrency int
}

// Rate is a budget's size.
type Rate struct {
	PerMinute float64 // 0: no budget known
	Burst     int
	// Adaptive: configured, so the fleet lowers it on a 429 and climbs back
	// after successes. A rate learned from the upstream's headers is the
	// upstream's own and does not adapt.
	Adaptive bool
}

// Ticket is a batch's booking in the fleet's budgets.
type Ticket struct {
	// Release ends the booking with what the batch used and what the
	// upstream said; nil when nothing was booked (the store unreachable).
	Release func(Outcome)
	// Shared says that the fleet's store booked the batch. Then Remaining
	// holds what the fleet's buckets had left once it was booked (negative:
	// in debt; +Inf: no such budget), and Slots the concurrency slots not
	// held by other replicas: the local budget follows them.
	Shared                             bool
	RemainingRequests, RemainingTokens float64
	Slots                              int
}

// Outcome is how a batch went, for the fleet's books.
type Outcome struct {
	// Requests and Tokens are what the batch used of what it booked: the
	// rest is refunded; zero for a batch that never went upstream.
	Requests, Tokens int
	// Called says the upstream was called.
	Called bool
	// RateLimited: the upstream answered 429; RetryAfter its pause.
	RateLimited bool
	RetryAfter  time.Duration
	// Succeeded: the upstream call succeeded.
	Succeeded bool
	// RateLimit is what the upstream said of its budget, nil: nothing.
	RateLimit *RateLimitInfo
	// OpenFor is set when this replica's breaker is open after the call:
	// the rest of the fleet holds the backend open that long.
	OpenFor time.Duration
}

// LocalBudget is a backend's own budget, as a Coordinator steers it. Its
// methods are safe for concurrent use and never block on a batch.
type LocalBudget interface {
	// Share scales the backend's own budgets (rates, bursts and
	// concurrency) to f of their configured size, 0 < f ≤ 1: 1/N of them in
	// a fleet of N. While the fleet's store answers, each booking's Ticket
	// then sets the buckets to what the fleet has left and the concurrency
	// to the slots the others leave, so that a busy replica borrows what
	// idle ones leave; while it does not, the share alone holds.
	Share(f float64)
	// Pause holds the backend's dispatch until t: another replica was
	// told to wait (a 429 with Retry-After).
	Pause(until time.Time)
	// HoldOpen treats the backend as if its breaker were open until t:
	// another replica's opened. Its routes fall back, or fail fast.
	HoldOpen(until time.Time)
}

// WithCoordinator shares every backend's budgets with the other replicas
// of a fleet through c. Default none: the Batcher holds its budgets alone.
func WithCoordinator(c Coordinator) Option { return func(cfg *config) { cfg.coordinator = c } }

// Share implements LocalBudget.
func (s *backendState) Share(f float64) {
	if !(f > 0 && f <= 1) {
		f = 1
	}
	s.send(bmsg{kind: bmShare, share: f})
}

// shareOwned scales the budgets to f of their configured size.
func (s *backendState) shareOwned(f float64, now time.Time) {
	grew := f > s.share
	s.share = f
	s.rpm.setShare(now, f)
	s.tpm.setShare(now, f)
	s.fleetSlots = 0
	if f < 1 {
		s.fleetSlots = shareOf(s.lim.maxConc, f)
	}
	if grew {
		s.regrant = true
	}
}

// Pause implements LocalBudget.
func (s *backendState) Pause(until time.Time) { s.send(bmsg{kind: bmPause, at: until}) }

// HoldOpen implements LocalBudget. Admission sees it at once; lanes waiting
// for a permit are told by the owner, as when the breaker opens here, so
// that their calls fall back.
func (s *backendState) HoldOpen(until time.Time) {
	for {
		old := s.heldOpenUntil.Load()
		if until.UnixNano() <= old || s.heldOpenUntil.CompareAndSwap(old, until.UnixNano()) {
			break
		}
	}
	s.send(bmsg{kind: bmHoldOpen})
}

// demand is what pm's batch asks of the fleet: its cost, and the budgets
// as the owner knew them at the grant.
func (s *backendState) demand(pm *permit) Demand {
	d := *pm.fleet
	d.Requests, d.Tokens = pm.requests, pm.tokens
	return d
}

// follow tells the owner what the fleet's buckets had left once pm's batch
// was booked.
func (s *backendState) follow(pm *permit, t Ticket) {
	if !t.Shared {
		return
	}
	s.send(bmsg{kind: bmFollow, pm: pm, fleet: [2]float64{t.RemainingRequests, t.RemainingTokens}, slots: t.Slots})
}

// followOwned sets the local buckets to what the fleet's had left once the
// permit's batch was booked (less what this replica granted since), and
// caps the concurrency to the slots other replicas leave: a replica that
// holds 1/N of each budget may so borrow what the others leave unused.
func (s *backendState) followOwned(m *bmsg, now time.Time) {
	// A fleet in debt repays it at the whole rate; this replica refills at
	// its share of it, so it takes its share of the debt.
	debt := func(rem float64) float64 {
		if rem < 0 {
			return rem * s.share
		}
		return rem
	}
	grew := s.rpm.follow(now, debt(m.fleet[0]), m.pm.spentAt[0])
	grew = s.tpm.follow(now, debt(m.fleet[1]), m.pm.spentAt[1]) || grew
	slots := max(1, m.slots)
	grew = grew || slots > s.fleetSlots
	s.fleetSlots = slots
	if grew {
		s.regrant = true
	}
}
