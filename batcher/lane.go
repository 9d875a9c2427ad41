package batcher

import (
	"container/heap"
	"math"
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

func keyOf(r *Request, rc *routeConfig) laneKey {
	k := laneKey{route: rc.Name}
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
func (k laneKey) name(op Operation) string {
	if op == OpEmbedding {
		return k.route
	}
	var sb strings.Builder
	sb.WriteString(k.route)
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
	granted atomic.Bool // set by the backend: a slot is ours

	mu     sync.Mutex
	queues [numPriorities]fifo // by priority, first in first out; may hold ended calls
	heap   deadlineHeap        // every queued call, earliest deadline first
	n      int                 // queued calls (the heap's length)
	tokens int                 // their estimated tokens
	flush  bool                // send everything queued now
	closed bool                // reclaimed: producers look the lane up again

	// Owner-only.
	timer   *time.Timer
	slot    bool // holds a dispatch slot
	idleAt  time.Time
	expired []*Call
}

func newLane(b *Batcher, key laneKey, rc *routeConfig) *lane {
	l := &lane{
		b:       b,
		key:     key,
		name:    key.name(rc.Op),
		route:   rc,
		be:      rc.backend,
		trigger: make(chan struct{}, 1),
		timer:   time.NewTimer(math.MaxInt64),
	}
	return l
}

// nudge wakes the owner without blocking.
func (l *lane) nudge() {
	select {
	case l.trigger <- struct{}{}:
	default:
	}
}

// push queues c. It reports false when the lane was reclaimed.
func (l *lane) push(c *Call) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	c.lane = l
	l.queues[c.req.Priority].push(c)
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
	if l.granted.Swap(false) {
		if l.slot {
			l.be.release() // a second grant: give it back
		} else {
			l.slot = true
		}
	}
	closing := l.b.closing.Load()
	bc := &l.route.Batch

	l.mu.Lock()
	for len(l.heap) > 0 && !l.heap[0].deadline.After(now) {
		c := heap.Pop(&l.heap).(*Call)
		l.dequeuedLocked(c)
		l.expired = append(l.expired, c)
	}
	waiting := false
	for l.n > 0 {
		if closing {
			l.flush = true
		}
		head, headP := l.bestLocked(now)
		send := l.slot || l.flush || l.n >= bc.MaxBatchSize ||
			(bc.MaxBatchTokens > 0 && l.tokens >= bc.MaxBatchTokens) ||
			!l.earliestDueLocked().After(now) ||
			(l.n >= bc.MinBatchSize && l.be.idle())
		if !send {
			break
		}
		if !l.slot && !l.be.acquire(l, headP, head.admitted) {
			waiting = true
			break
		}
		l.slot = false
		l.startLocked(l.cutLocked(now), now)
	}
	if l.n == 0 {
		l.flush = false
	}
	var next time.Time
	if len(l.heap) > 0 {
		next = l.heap[0].deadline
		if !waiting {
			if due := l.earliestDueLocked(); due.Before(next) {
				next = due
			}
		}
	}
	idle := l.n == 0
	l.mu.Unlock()

	for i, c := range l.expired {
		c.finish(Result{Err: ErrDeadline}, now)
		l.expired[i] = nil
	}
	l.expired = l.expired[:0]

	if !idle {
		l.idleAt = time.Time{}
		l.timer.Reset(next.Sub(now))
		return false
	}
	if l.slot {
		l.slot = false
		l.be.release()
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
	return best, Priority(bestP)
}

// earliestDueLocked returns when the lane must send, from the queued calls'
// priority delays. Heads are trimmed.
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

// cutLocked takes the next batch off the queue: best rank first, up to the
// route's size and token budget (a batch always holds at least one call).
func (l *lane) cutLocked(now time.Time) []*Call {
	bc := &l.route.Batch
	calls := make([]*Call, 0, min(l.n, bc.MaxBatchSize))
	tokens := 0
	for len(calls) < bc.MaxBatchSize && l.n > 0 {
		c, p := l.bestLocked(now)
		if bc.MaxBatchTokens > 0 && len(calls) > 0 && tokens+c.tokens > bc.MaxBatchTokens {
			break
		}
		l.queues[p].pop()
		heap.Remove(&l.heap, c.heapIdx)
		l.dequeuedLocked(c)
		calls = append(calls, c)
		tokens += c.tokens
	}
	return calls
}

// fifo is a queue of calls backed by a slice that is reused once drained.
type fifo struct {
	items []*Call
	head  int
}

func (q *fifo) len() int     { return len(q.items) - q.head }
func (q *fifo) peek() *Call  { return q.items[q.head] }
func (q *fifo) push(c *Call) { q.items = append(q.items, c) }

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
