package server

import (
	"sync"
	"sync/atomic"
)

// Defaults of the stream limits.
const (
	// DefaultMaxStreams bounds the SubmitStreams open at once, server-wide.
	DefaultMaxStreams = 1024
	// DefaultMaxPendingMessages is the server-wide budget of answers
	// (Completions and Rejections) owed on streams and not yet sent.
	DefaultMaxPendingMessages = 1024
	// streamFloor is how many answers any stream may owe whatever the
	// budget: a stream whose caller reads is never starved by streams whose
	// callers do not.
	streamFloor = 2
)

// WithMaxStreams bounds the SubmitStreams open at once; one more is
// refused with RESOURCE_EXHAUSTED naming the limit. Default
// DefaultMaxStreams; less than 1 is invalid.
func WithMaxStreams(n int) Option { return func(c *config) { c.maxStreams = n } }

// WithMaxPendingMessages sets the server-wide budget of answers owed on
// streams and not yet sent: what the server buffers for callers. A stream
// reads its next message only while it owes fewer than its window, and,
// beyond a floor of a few per stream, while the server-wide budget has
// room: a caller that stops reading holds its answers, the server stops
// reading from it, and HTTP/2 flow control pushes back on it, while memory
// stays bounded. Default DefaultMaxPendingMessages; less than 1 is invalid.
func WithMaxPendingMessages(n int) Option { return func(c *config) { c.maxPending = n } }

func (c *config) checkLimits() []error {
	var errs []error
	if c.maxStreams == 0 {
		c.maxStreams = DefaultMaxStreams
	}
	if c.maxStreams < 1 {
		errs = append(errs, badOption("max_streams", "must be at least 1, got %d", c.maxStreams))
	}
	if c.maxPending == 0 {
		c.maxPending = DefaultMaxPendingMessages
	}
	if c.maxPending < 1 {
		errs = append(errs, badOption("max_pending_messages", "must be at least 1, got %d", c.maxPending))
	}
	return errs
}

// budget is the server-wide count of answers owed on streams.
//
// A stream's receiver that finds the budget spent waits in a FIFO queue;
// each token given back wakes one waiter, not all of them: with a thousand
// streams waiting, waking every one on every release turned each answer
// sent into a thousand wake-ups and a convoy on mu, which slowed the
// server's reading of everyone's requests (and so held their bytes in
// gRPC's receive buffers longer). A stream whose own tokens fall below the
// floor is woken through its own channel, whatever its place in the queue.
type budget struct {
	max  int64
	used atomic.Int64

	mu    sync.Mutex
	queue []*budgetTurn // waiters in arrival order
	// queued is len(queue), but counted in before a waiter reads used
	// for the last time (acquire), so that release, which gives its
	// tokens back before it reads queued, need not take mu to find
	// nobody waiting: a stream's sender releases once per take.
	queued atomic.Int64
}

// budgetTurn is a stream's place in the budget's queue: the channel
// (capacity 1) that wakes its receiver, when release chooses it for a
// token or when the stream's own tokens fall below the floor, and whether
// release chose it. chosen spares a receiver that release woke, the usual
// case, a second turn on the budget's lock to learn why it woke: in a
// mutex profile of the stream benchmark those turns (remove) were a fifth
// of all the lock delay.
type budgetTurn struct {
	wake   chan struct{}
	chosen atomic.Bool // set by release as it takes the turn off the queue
}

func newBudget(max int) *budget {
	return &budget{max: int64(max)}
}

// tryTake takes a token when used is under max.
func (b *budget) tryTake() bool {
	for {
		u := b.used.Load()
		if u >= b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

// acquire takes a token for a stream that holds held tokens: at once below
// the floor, else once used is under max. t is the stream's turn: release
// wakes it when its turn comes, and the stream's sender when held falls
// below the floor. It returns false when done1 or done2 ends first.
func (b *budget) acquire(held *atomic.Int64, t *budgetTurn, done1, done2 <-chan struct{}) bool {
	chosen := false // release woke this waiter for a token it has not taken
	for {
		if held.Load() < streamFloor {
			b.used.Add(1)
			if chosen {
				b.passOn()
			}
			return true
		}
		if b.tryTake() {
			return true
		}
		b.mu.Lock()
		b.queued.Add(1) // before used is read: see queued
		if b.used.Load() < b.max || held.Load() < streamFloor {
			b.queued.Add(-1)
			b.mu.Unlock()
			continue
		}
		select { // a stale signal from an earlier wait
		case <-t.wake:
		default:
		}
		t.chosen.Store(false) // off the queue: nobody else writes it now
		b.queue = append(b.queue, t)
		b.mu.Unlock()
		chosen = false // it waits again: whatever it was woken for is gone
		select {
		case <-t.wake:
			// Not chosen: still queued, unless release chose it since.
			chosen = t.chosen.Load() || !b.remove(t)
		case <-done1:
		case <-done2:
		}
		select {
		case <-done1:
		case <-done2:
		default:
			continue
		}
		if chosen || t.chosen.Load() || !b.remove(t) {
			b.passOn() // release chose it: the token goes to the next waiter
		}
		return false
	}
}

// remove takes t out of the queue and reports whether it was there;
// when it was not, release chose it.
func (b *budget) remove(t *budgetTurn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, w := range b.queue {
		if w == t {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			b.queued.Add(-1)
			return true
		}
	}
	return false
}

// passOn wakes the next waiter while there is room: a waiter that release
// chose took no token, so that none is left with nobody woken for it.
func (b *budget) passOn() {
	b.mu.Lock()
	if b.used.Load() < b.max {
		b.wakeLocked(1)
	}
	b.mu.Unlock()
}

// release gives back n tokens and wakes as many waiters.
func (b *budget) release(n int64) {
	if n <= 0 {
		return
	}
	b.used.Add(-n)
	if b.queued.Load() == 0 {
		return // nobody waits, and a waiter to come sees the tokens (queued)
	}
	b.mu.Lock()
	b.wakeLocked(n)
	b.mu.Unlock()
}

// wakeLocked wakes up to n waiters, first come first.
func (b *budget) wakeLocked(n int64) {
	for ; n > 0 && len(b.queue) > 0; n-- {
		t := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.queued.Add(-1)
		t.chosen.Store(true) // before the wake, which tells the receiver to look
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// PendingMessages reports the answers owed on streams server-wide.
func (s *Server) PendingMessages() int64 { return s.budget.used.Load() }

// takeBudget takes a server-wide token for st's next message; false when
// the stream ends first. A token taken after the stream closed is given
// back at once (close returned the others).
func (st *stream) takeBudget() bool {
	if !st.s.budget.acquire(&st.held, &st.turn, st.stopped, st.ctx.Done()) {
		return false
	}
	if h := st.s.testHookBudgetTaken; h != nil {
		h()
	}
	// The token counts in held before gone is read, and close sets gone
	// before it takes held: one of the two gives the token back.
	st.held.Add(1)
	if st.gone.Load() {
		st.dropBudget()
		return false
	}
	return true
}

// dropBudget gives back one of st's server-wide tokens, if it holds any.
func (st *stream) dropBudget() { st.dropBudgetN(1) }

// dropBudgetN gives back n of st's server-wide tokens, or as many as it
// holds.
func (st *stream) dropBudgetN(n int64) {
	for n > 0 {
		h := st.held.Load()
		if h <= 0 {
			return
		}
		k := min(h, n)
		if st.held.CompareAndSwap(h, h-k) {
			st.s.budget.release(k)
			if h-k < streamFloor { // below the floor: the receiver may read
				select {
				case st.turn.wake <- struct{}{}:
				default:
				}
			}
			return
		}
	}
}

// dropAllBudget gives back every server-wide token st holds: its answers
// will never be sent.
func (st *stream) dropAllBudget() { st.s.budget.release(st.held.Swap(0)) }
