package batcher

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// laneKey says which requests may share a batch: same route and same
// batch-relevant parameters. Embedding lanes ignore generation parameters.
type laneKey struct {
	route     string
	target    uint8 // index in the route's targets: 0 its backend, then fallbacks
	maxTokens int32
	temp      float32
	topP      float32
	seed      int64
	set       uint8 // which of temp, topP, seed are set
	stop      string
}

const (
	setTemp uint8 = 1 << iota
	setTopP
	setSeed
)

func keyOf(r *Request, rc *routeConfig, target uint8) laneKey {
	k := laneKey{route: rc.Name, target: target}
	if rc.Op == OpEmbedding {
		return k
	}
	p := &r.Params
	k.maxTokens = p.MaxTokens
	if k.maxTokens == 0 {
		k.maxTokens = rc.DefaultMaxTokens
	}
	if p.Temperature != nil {
		k.temp, k.set = *p.Temperature, k.set|setTemp
	}
	if p.TopP != nil {
		k.topP, k.set = *p.TopP, k.set|setTopP
	}
	if p.Seed != nil {
		k.seed, k.set = *p.Seed, k.set|setSeed
	}
	if len(p.Stop) > 0 {
		k.stop = strings.Join(p.Stop, "\x00")
	}
	return k
}

// name is the lane's name in events: the route, then its parameters.
func (k laneKey) name(op Operation, backend string) string {
	if op == OpEmbedding {
		return k.route + "@" + backend
	}
	var sb strings.Builder
	sb.WriteString(k.route + "@" + backend)
	sb.WriteString("{max_tokens=")
	sb.WriteString(strconv.Itoa(int(k.maxTokens)))
	if k.set&setTemp != 0 {
		sb.WriteString(",temperature=" + strconv.FormatFloat(float64(k.temp), 'g', -1, 32))
	}
	if k.set&setTopP != 0 {
		sb.WriteString(",top_p=" + strconv.FormatFloat(float64(k.topP), 'g', -1, 32))
	}
	if k.set&setSeed != 0 {
		sb.WriteString(",seed=" + strconv.FormatInt(k.seed, 10))
	}
	if k.stop != "" {
		sb.WriteString(",stop=" + strconv.Quote(strings.ReplaceAll(k.stop, "\x00", "|")))
	}
	sb.WriteByte('}')
	return sb.String()
}

// lane accumulates one laneKey's requests and cuts them into batches.
//
// One goroutine, the owner (loop), cuts batches, runs the timer and starts
// dispatch. Producers only push under mu and nudge the owner through the
// capacity-1 trigger channel. The backend hands the lane a dispatch slot by
// setting granted and nudging.
type lane struct {
	b       *Batcher
	key     laneKey
	name    string
	route   *routeConfig
	be      *backendState
	trigger chan struct{}
	granted atomic.Pointer[permit] // set by the backend: a permit for us
	// partials counts the lane's batches in flight that left below
	// MaxBatchSize. A lane holding MinBatchSize sends early (as soon as the
	// backend has a free slot) only while none is: one small batch at a
	// time, so that under load batches fill instead of leaving in crumbs.
	partials atomic.Int32
	nudged   atomic.Bool // a wake-up is pending in trigger
	gone     atomic.Bool // reclaimed: its owner has exited

	mu     sync.Mutex
	queues [numPriorities]fifo // by urgency level, first in first out; may hold ended calls
	heap   deadlineHeap        // every queued call, earliest deadline first
	n      int                 // queued calls (the heap's length)
	tokens int                 // their estimated tokens
	flush  bool                // send everything queued now
	closed bool                // reclaimed: producers look the lane up again

	// Owner-only.
	timer  *time.Timer
	pm     *permit // a dispatch permit held for the next cut
	idleAt time.Time
	ended  []ending // calls to end once mu is released
	moved  []*Call  // calls to move to the next target once mu is released
}

// ending is a call and the error it ends with.
type ending struct {
	c   *Call
	err error
}

func newLane(b *Batcher, key laneKey, rc *routeConfig) *lane {
	be := rc.targets[key.target].be
	l := &lane{
		b:       b,
		key:     key,
		name:    key.name(rc.Op, be.name),
		route:   rc,
		be:      be,
		trigger: make(chan struct{}, 1),
		timer:   time.NewTimer(math.MaxInt64),
	}
	return l
}

// nudge wakes the owner without blocking. The flag spares producers the
// channel's lock while a wake-up is already pending.
func (l *lane) nudge() {
	if l.nudged.Load() || !l.nudged.CompareAndSwap(false, true) {
		return
	}
	select {
	case l.trigger <- struct{}{}:
	default:
	}
}

// give hands the lane a permit from its backend.
func (l *lane) give(pm *permit) {
	if pm == nil { // not a permit: look at the backend again
		l.nudge()
		return
	}
	if !l.granted.CompareAndSwap(nil, pm) {
		l.be.giveBack(pm) // one is waiting already
		return
	}
	if l.gone.Load() { // nobody will take it: reclaim raced the grant
		if pm := l.granted.Swap(nil); pm != nil {
			l.be.giveBack(pm)
		}
		return
	}
	l.nudge()
}

// push queues c. It reports false when the lane was reclaimed.
func (l *lane) push(c *Call) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	if !c.pending() { // ended while it moved
		l.mu.Unlock()
		return true
	}
	c.lane = l
	l.queues[c.req.Priority.level()].push(c)
	heap.Push(&l.heap, c)
	l.n++
	l.tokens += c.tokens
	c.queued.Store(true)
	l.mu.Unlock()
	l.nudge()
	return true
}

// forget takes an ended call out of the queue.
func (l *lane) forget(c *Call) {
	l.mu.Lock()
	if c.heapIdx >= 0 {
		heap.Remove(&l.heap, c.heapIdx)
		l.dequeuedLocked(c)
	}
	l.mu.Unlock()
}

// dequeuedLocked books c's leaving the heap. Its fifo entry, if any, is
// skipped later.
func (l *lane) dequeuedLocked(c *Call) {
	c.heapIdx = -1
	c.queued.Store(false)
	l.n--
	l.tokens -= c.tokens
}

// loop is the owner goroutine.
func (l *lane) loop() {
	defer l.b.wg.Done()
	defer l.timer.Stop()
	l.idleAt = time.Now()
	for {
		select {
		case <-l.trigger:
			l.nudged.Store(false)
		case <-l.timer.C:
		}
		if l.step() {
			return
		}
	}
}

// step expires, cuts and dispatches what is due, and arms the timer. It
// reports whether the lane is done for good.
func (l *lane) step() (exit bool) {
	now := time.Now()
	if pm := l.granted.Swap(nil); pm != nil {
		if l.pm != nil {
			l.be.giveBack(pm) // a second permit: give it back
		} else {
			l.pm = pm
		}
	}
	closing := l.b.closing.Load()
	bc := &l.route.Batch

	l.mu.Lock()
	if l.b.aborted.Load() { // shutdown's deadline passed: end whatever came in since
		for len(l.heap) > 0 {
			c := heap.Pop(&l.heap).(*Call)
			l.dequeuedLocked(c)
			l.ended = append(l.ended, ending{c, ErrShutdown})
		}
	}
	for len(l.heap) > 0 && !l.heap[0].deadline.After(now) {
		c := heap.Pop(&l.heap).(*Call)
		l.dequeuedLocked(c)
		l.ended = append(l.ended, ending{c, ErrDeadline})
	}
	waiting := false
	for l.n > 0 {
		if closing {
			l.flush = true
		}
		head, headP := l.bestLocked(now)
		send := l.pm != nil || l.flush || l.n >= bc.MaxBatchSize ||
			(bc.MaxBatchTokens > 0 && l.tokens >= bc.MaxBatchTokens) ||
			!l.earliestDueLocked().After(now) ||
			(l.n >= bc.MinBatchSize && l.partials.Load() == 0)
		if !send {
			break
		}
		if l.pm == nil {
			var want cost // what the rate budgets need to know
			if l.be.limited() {
				want = l.planLocked(now, l.unlimited())
			}
			pm, wait, budget, err := l.be.acquire(l, headP, head.admitted, want)
			if err != nil {
				l.failoverLocked(func(*Call) bool { return true }, fmt.Errorf("%w: circuit open on backend %q", ErrNoBackend, l.be.name))
				continue
			}
			if pm == nil {
				waiting = true
				if wait > 0 {
					// Whoever the wait alone would take past its deadline
					// goes to a fallback, or fails now.
					limit := now.Add(wait)
					l.failoverLocked(func(c *Call) bool { return c.deadline.Before(limit) },
						&BudgetError{Backend: l.be.name, Budget: budget, Wait: wait})
				}
				break
			}
			l.pm = pm
		}
		caps := l.unlimited()
		if l.be.limited() {
			caps = l.be.extend(l.pm, l.planLocked(now, caps), headP)
		}
		calls, got := l.cutLocked(now, caps)
		pm := l.pm
		l.pm = nil
		l.be.settle(pm, got)
		l.startLocked(calls, pm, now)
	}
	if l.n == 0 {
		l.flush = false
		if l.pm == nil {
			l.be.unregister(l) // nothing left to wait for
		}
	}
	var next time.Time
	if len(l.heap) > 0 {
		next = l.heap[0].deadline
		if !waiting {
			l.trimLocked() // a failover may have left ended heads
			if due := l.earliestDueLocked(); due.Before(next) {
				next = due
			}
		}
	}
	idle := l.n == 0
	l.mu.Unlock()

	for i, e := range l.ended {
		e.c.finish(Result{Err: e.err}, now)
		l.ended[i] = ending{}
	}
	l.ended = l.ended[:0]
	for i, c := range l.moved {
		l.b.enqueue(c)
		l.moved[i] = nil
	}
	l.moved = l.moved[:0]

	if !idle {
		l.idleAt = time.Time{}
		l.timer.Reset(next.Sub(now))
		return false
	}
	if l.pm != nil {
		l.be.giveBack(l.pm)
		l.pm = nil
	}
	if l.idleAt.IsZero() {
		l.idleAt = now
	}
	if closing || !now.Before(l.idleAt.Add(l.b.cfg.idleLane)) {
		if l.b.reclaim(l) {
			return true
		}
	}
	l.timer.Reset(l.idleAt.Add(l.b.cfg.idleLane).Sub(now))
	return false
}

// failoverLocked takes the queued calls that match out of the lane: each
// moves to the route's next target, or, on the last one, ends with err.
func (l *lane) failoverLocked(match func(*Call) bool, err error) {
	last := int(l.key.target)+1 >= len(l.route.targets)
	for _, c := range slices.Clone(l.heap) {
		if !match(c) {
			continue
		}
		heap.Remove(&l.heap, c.heapIdx)
		l.dequeuedLocked(c)
		if last {
			if errors.Is(err, ErrBudgetExhausted) {
				l.be.stats.budgetFails.Add(1)
			}
			l.ended = append(l.ended, ending{c, err})
			continue
		}
		l.be.stats.fallbacks.Add(1)
		c.target = l.key.target + 1
		l.moved = append(l.moved, c)
	}
}

// trimLocked drops ended calls from the head of each fifo.
func (l *lane) trimLocked() {
	for p := range l.queues {
		q := &l.queues[p]
		for q.len() > 0 && q.peek().heapIdx < 0 {
			q.pop()
		}
	}
}

// rank orders calls for dispatch: lower goes first. A call climbs one
// priority for every aging step it has waited.
func (l *lane) rank(c *Call, p int, now time.Time) time.Duration {
	return time.Duration(p)*l.b.cfg.agingStep - now.Sub(c.admitted)
}

// bestLocked returns the queued call that goes first, and its priority.
// The lane must hold at least one call.
func (l *lane) bestLocked(now time.Time) (*Call, Priority) {
	l.trimLocked()
	var best *Call
	var bestP int
	var bestRank time.Duration
	for p := range l.queues {
		if l.queues[p].len() == 0 {
			continue
		}
		c := l.queues[p].peek()
		r := l.rank(c, p, now)
		if best == nil || r < bestRank || (r == bestRank && c.admitted.Before(best.admitted)) {
			best, bestP, bestRank = c, p, r
		}
	}
	return best, byLevel[bestP]
}

// earliestDueLocked returns when the lane must send, from the queued calls'
// priority delays. The caller has trimmed the heads (bestLocked does).
func (l *lane) earliestDueLocked() time.Time {
	var due time.Time
	for p := range l.queues {
		if l.queues[p].len() == 0 {
			continue
		}
		if d := l.queues[p].peek().due; due.IsZero() || d.Before(due) {
			due = d
		}
	}
	return due
}

// unlimited is a cost no permit caps.
func (l *lane) unlimited() cost { return cost{requests: math.MaxInt, tokens: math.MaxInt} }

// orderLocked visits queued calls best rank first, while visit says yes. It
// returns how many entries it passed in each fifo (ended ones included), so
// that a cut can pop exactly those.
func (l *lane) orderLocked(now time.Time, visit func(c *Call) bool) (passed [numPriorities]int) {
	for {
		var best *Call
		var bestP int
		var bestRank time.Duration
		for p := range l.queues {
			q := &l.queues[p]
			for passed[p] < q.len() && q.at(passed[p]).heapIdx < 0 {
				passed[p]++ // ended: skip
			}
			if passed[p] == q.len() {
				continue
			}
			c := q.at(passed[p])
			if r := l.rank(c, p, now); best == nil || r < bestRank || (r == bestRank && c.admitted.Before(best.admitted)) {
				best, bestP, bestRank = c, p, r
			}
		}
		if best == nil || !visit(best) {
			return passed
		}
		passed[bestP]++
	}
}

// planLocked returns the cost of the batch a cut would take now within caps:
// up to the route's size and token budget, best rank first, and at least
// one call.
func (l *lane) planLocked(now time.Time, caps cost) cost {
	var got cost
	n := 0
	l.orderLocked(now, func(c *Call) bool {
		if !l.fits(n, got, c, caps) {
			return false
		}
		n++
		got = cost{requests: l.be.calls(l.route.Name, l.route.Op, n), tokens: got.tokens + c.tokens}
		return true
	})
	return got
}

// fits reports whether c may join a batch of n calls costing got.
func (l *lane) fits(n int, got cost, c *Call, caps cost) bool {
	if n == 0 {
		return true
	}
	bc := &l.route.Batch
	return n < bc.MaxBatchSize &&
		(bc.MaxBatchTokens == 0 || got.tokens+c.tokens <= bc.MaxBatchTokens) &&
		got.tokens+c.tokens <= caps.tokens &&
		l.be.calls(l.route.Name, l.route.Op, n+1) <= caps.requests
}

// cutLocked takes the next batch off the queue within caps and returns it
// with its cost.
func (l *lane) cutLocked(now time.Time, caps cost) ([]*Call, cost) {
	calls := make([]*Call, 0, min(l.n, l.route.Batch.MaxBatchSize))
	var got cost
	passed := l.orderLocked(now, func(c *Call) bool {
		if !l.fits(len(calls), got, c, caps) {
			return false
		}
		calls = append(calls, c)
		got = cost{requests: l.be.calls(l.route.Name, l.route.Op, len(calls)), tokens: got.tokens + c.tokens}
		return true
	})
	for p, k := range passed {
		for range k {
			l.queues[p].pop()
		}
	}
	for _, c := range calls {
		heap.Remove(&l.heap, c.heapIdx)
		l.dequeuedLocked(c)
	}
	return calls, got
}

// fifo is a queue of calls backed by a slice that is reused once drained.
type fifo struct {
	items []*Call
	head  int
}

func (q *fifo) len() int       { return len(q.items) - q.head }
func (q *fifo) at(i int) *Call { return q.items[q.head+i] }
func (q *fifo) peek() *Call    { return q.items[q.head] }
func (q *fifo) push(c *Call)   { q.items = append(q.items, c) }

func (q *fifo) pop() {
	q.items[q.head] = nil
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head > 1024 && q.head*2 > len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// deadlineHeap orders queued calls by deadline; it keeps Call.heapIdx.
type deadlineHeap []*Call

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *deadlineHeap) Push(x any) {
	c := x.(*Call)
	c.heapIdx = len(*h)
	*h = append(*h, c)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}
