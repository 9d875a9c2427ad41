package batcher

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// laneKey says which requests may share a batch: same route and target,
// and the same generation parameters among those the target's backend
// shares across a batch (ParamSharer; all of them by default). Embedding
// lanes ignore generation parameters; a fan-out backend's lanes too.
type laneKey struct {
	route     string
	rc        *routeConfig // the route's settings: SetRoutes' new settings get new lanes
	target    uint8        // index in the route's targets: 0 its backend, then fallbacks
	maxTokens int32
	temp      float32
	topP      float32
	seed      int64
	set       uint8 // which of temp, topP, seed are set
	stop      string
	stream    bool   // streamed requests: batches of one (stream.go)
	rich      string // richKey: empty for a plain request
}

// same is k == *o, cheapest fields first, and the route's name not
// compared: the same rc is the same route. Each admission calls it, and
// most keys have neither stop nor rich: those are compared without a call
// to memequal.
func (k *laneKey) same(o *laneKey) bool {
	return k.rc == o.rc && k.target == o.target && k.stream == o.stream && k.maxTokens == o.maxTokens && k.set == o.set &&
		k.temp == o.temp && k.topP == o.topP && k.seed == o.seed &&
		(len(k.stop)|len(k.rich)|len(o.stop)|len(o.rich) == 0 || k.stop == o.stop && k.rich == o.rich)
}

const (
	setTemp uint8 = 1 << iota
	setTopP
	setSeed
)

func keyOf(r *Request, rc *routeConfig, target uint8) laneKey {
	return keyWith(r, rc, target, rc.targets[target].shared)
}

// keyWith is r's lane key on target counting the parameters in shared.
func keyWith(r *Request, rc *routeConfig, target uint8, shared ParamSet) laneKey {
	k := laneKey{route: rc.Name, rc: rc, target: target}
	if rc.Op == OpEmbedding {
		return k
	}
	if r.Stream {
		// Alone upstream: no parameter needs a lane of its own.
		k.stream = true
		return k
	}
	p := &r.Params
	if shared.Has(ParamMaxTokens) {
		k.maxTokens = p.MaxTokens
		if k.maxTokens == 0 {
			k.maxTokens = rc.DefaultMaxTokens
		}
	}
	if p.Temperature != nil && shared.Has(ParamTemperature) {
		k.temp, k.set = *p.Temperature, k.set|setTemp
	}
	if p.TopP != nil && shared.Has(ParamTopP) {
		k.topP, k.set = *p.TopP, k.set|setTopP
	}
	if p.Seed != nil && shared.Has(ParamSeed) {
		k.seed, k.set = *p.Seed, k.set|setSeed
	}
	if len(p.Stop) > 0 && shared.Has(ParamStop) {
		k.stop = strings.Join(p.Stop, "\x00")
	}
	if shared.Has(ParamRich) && r.richFields() { // richFields inlined: a plain request makes no call
		k.rich = richKey(r)
	}
	return k
}

// name is the lane's name in events: the route, then its parameters.
func (k laneKey) name(op Operation, backend string) string {
	if op == OpEmbedding {
		return k.route + "@" + backend
	}
	if k.stream {
		return k.route + "@" + backend + "{stream}"
	}
	var params []string
	if k.maxTokens != 0 { // 0: max_tokens is not shared on this target
		params = append(params, "max_tokens="+strconv.Itoa(int(k.maxTokens)))
	}
	if k.set&setTemp != 0 {
		params = append(params, "temperature="+strconv.FormatFloat(float64(k.temp), 'g', -1, 32))
	}
	if k.set&setTopP != 0 {
		params = append(params, "top_p="+strconv.FormatFloat(float64(k.topP), 'g', -1, 32))
	}
	if k.set&setSeed != 0 {
		params = append(params, "seed="+strconv.FormatInt(k.seed, 10))
	}
	if k.stop != "" {
		params = append(params, "stop="+strconv.Quote(strings.ReplaceAll(k.stop, "\x00", "|")))
	}
	if k.rich != "" {
		h := fnv.New32a()
		h.Write([]byte(k.rich))
		params = append(params, "chat="+strconv.FormatUint(uint64(h.Sum32()), 16))
	}
	if len(params) == 0 {
		return k.route + "@" + backend
	}
	return k.route + "@" + backend + "{" + strings.Join(params, ",") + "}"
}

// Queue indexes in lane.queues: flushed calls first, then one level per
// urgency.
const (
	qFlushed  = 0
	numQueues = numPriorities + 1
)

// msgKind is the kind of a message to a lane's owner.
type msgKind uint8

const (
	msgPush   msgKind = iota // queue c
	msgForget                // c ended: take it out of the queue
	msgGrant                 // the backend granted pm (nil pm: look at the backend again)
	msgFlush                 // send fw's calls now and answer when they are sent
)

type msg struct {
	kind msgKind
	c    *Call
	pm   *permit
	fw   *flushWait
}

// flushWait is one Flush or FlushCalls waiting on one lane.
type flushWait struct {
	calls    []*Call      // nil: everything queued
	left     atomic.Int32 // flushed calls not yet sent or ended
	done     chan struct{}
	unwaited bool // nobody waits: the lane books none of its calls (newFlushWait)
}

// sent books one of fw's calls leaving: sent upstream, or ended.
func (fw *flushWait) sent() {
	if fw.left.Add(-1) == 0 {
		close(fw.done)
	}
}

// lane accumulates one laneKey's requests and cuts them into batches.
//
// One goroutine, the owner (loop), holds all of the lane's state but the
// inbox; nobody else reads or writes it. Producers, finishing calls, the
// backend's grants and Flush only append a message to the inbox under inMu
// and nudge the owner through the capacity-1 trigger channel (OTel-Go's
// sdk/log batch.go shape). The owner takes the whole inbox at once and then
// works without a lock: it expires deadlines, decides that a batch is due,
// asks its backend for a permit, cuts the batch and hands it, with the
// permit, to the backend's dispatch workers. No backend call and no
// goroutine start happens in the owner.
type lane struct {
	// Set at creation; read-only.
	b       *Batcher
	holder  laneHolder // the caller that made it, counted against its fair share
	key     laneKey
	name    string
	route   *routeConfig
	bc      *BatchConfig // route.Batch, or streamBatch for streamed requests
	be      *backendState
	trigger chan struct{}

	// The inbox, guarded by inMu.
	inMu   sync.Mutex
	inbox  []msg
	closed bool // the owner has exited: senders look the lane up again

	// Atomics, each with one writer named.
	nudged atomic.Bool // a wake-up is pending in trigger: producers set, owner clears
	// sleepUntil is when the owner's timer wakes it while it sleeps with
	// calls queued (unix ns), 0 while it is awake or idle: written by the
	// owner, read by producers to skip nudges it does not need.
	sleepUntil atomic.Int64
	size       atomic.Int32 // calls queued or in the inbox: producers add, owner subtracts
	partials   atomic.Int32 // small batches in flight: owner adds, workers subtract
	inFlight   atomic.Int32 // calls in flight upstream: owner adds, workers subtract
	// idleSince is when the owner found the lane empty (unix ns), 0 while
	// it holds calls: written by the owner, read by the cap's eviction.
	idleSince atomic.Int64
	// evicted is set, under lanesMu and inMu, when the cap's eviction
	// closed the idle lane; its owner exits at its next step.
	evicted  atomic.Bool
	queuedBy [numPriorities]atomic.Int32 // queued calls by priority: added by push, taken by the owner, read by Lanes

	// Owner-only.
	spare       []msg                  // the inbox's other half
	queues      [numQueues]level       // flushed, then by urgency; may hold tombstones (nil)
	spareFlows  []*flow                // flows to reuse
	heap        deadlineHeap           // every queued call, earliest deadline first
	tokens      int                    // their estimated tokens
	pm          *permit                // a permit held for the next cut
	asked       bool                   // registered as a waiter with the backend
	askedAs     waiter                 // what it asked for
	onlyFlushed bool                   // the next cut takes flushed calls only
	lates       int                    // queued calls marked late (see earliestDue)
	lateDue     time.Time              // no later than the earliest due of those, while any
	flushOf     map[*Call][]*flushWait // flushes waiting on a queued call
	timer       *time.Timer
	wake        time.Time // when the timer is armed for while calls are queued; zero otherwise
	idleAt      time.Time
	ended       []ending // calls to end after the step
	moved       []*Call  // calls to move to the next target after the step
}

// ending is a call and the error it ends with.
type ending struct {
	c   *Call
	err error
}

func newLane(b *Batcher, key laneKey, rc *routeConfig) *lane {
	be := rc.targets[key.target].be
	bc := &rc.Batch
	if key.stream {
		bc = &streamBatch
	}
	return &lane{
		b:       b,
		key:     key,
		name:    key.name(rc.Op, be.name),
		route:   rc,
		bc:      bc,
		be:      be,
		trigger: make(chan struct{}, 1),
		timer:   time.NewTimer(math.MaxInt64),
	}
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

// send appends m to the inbox and nudges the owner. It reports false when
// the lane is closed.
func (l *lane) send(m msg) bool {
	l.inMu.Lock()
	if l.closed {
		l.inMu.Unlock()
		return false
	}
	l.inbox = append(l.inbox, m)
	l.inMu.Unlock()
	l.nudge()
	return true
}

// push queues c. It reports false when the lane is closed. Once c is in
// the inbox it is the owner's: it may be batched, delivered and (Do's)
// reused at once, so push reads what it needs of c before.
func (l *lane) push(c *Call) bool {
	due, deadline := c.due().UnixNano(), c.deadline.UnixNano()
	p := c.req.Priority
	l.inMu.Lock()
	if l.closed {
		l.inMu.Unlock()
		return false
	}
	// queued is set before the message is seen: a finish from now on sends
	// a forget after it, and the owner drops c if it ended before.
	c.lane.Store(l)
	c.queued.Store(true)
	l.queuedBy[p].Add(1) // counted from the push, so Lanes sees it at once
	l.inbox = append(l.inbox, msg{kind: msgPush, c: c})
	size := l.size.Add(1)
	l.inMu.Unlock()
	if l.wakeFor(due, deadline, size) {
		l.nudge()
	}
	return true
}

// wakeFor reports whether a push of a call due at due with the given
// deadline (unix ns), making size calls queued or on their way, needs the
// owner now. A sleeping owner with calls queued wakes at its timer anyway
// and reads the inbox then; it needs waking only when the call is due, or
// its deadline passes, before that, or the call completes a batch. A nudge
// too many costs a wake-up; one too few would leave the call waiting, so
// when in doubt it nudges.
func (l *lane) wakeFor(due, deadline int64, size int32) bool {
	wake := l.sleepUntil.Load()
	if wake == 0 {
		return true // awake, or idle: no timer of its own will read the inbox
	}
	bc := l.bc
	return due < wake || deadline < wake || int(size) >= bc.MaxBatchSize || bc.MaxBatchTokens > 0 ||
		(int(size) >= bc.MinBatchSize && l.partials.Load() == 0)
}

// forget asks the owner to take an ended call out of the queue.
func (l *lane) forget(c *Call) { l.send(msg{kind: msgForget, c: c}) }

// grant hands the lane a permit from its backend; a lane that closed gives
// it straight back, so that no permit is ever stranded.
func (l *lane) grant(pm *permit) {
	if !l.send(msg{kind: msgGrant, pm: pm}) && pm != nil {
		l.be.giveBack(pm)
	}
}

// flush asks the owner to send fw's calls now. A closed lane holds none.
func (l *lane) flush(fw *flushWait) {
	if !l.send(msg{kind: msgFlush, fw: fw}) {
		close(fw.done)
	}
}

// loop is the owner goroutine.
func (l *lane) loop() {
	defer l.b.lanesWG.Done()
	defer l.timer.Stop()
	l.idleAt = time.Now()
	for {
		select {
		case <-l.trigger:
			l.nudged.Store(false)
		case <-l.timer.C:
		}
		for {
			l.sleepUntil.Store(0) // awake: every push nudges
			if l.step() {
				return
			}
			if l.wake.IsZero() {
				break
			}
			// Asleep until wake: pushes that can wait for it stop nudging.
			// A push that came in before the store saw 0 and nudged; one
			// after it sees wake. One in between is caught here.
			l.sleepUntil.Store(l.wake.UnixNano())
			l.inMu.Lock()
			more := len(l.inbox) > 0
			l.inMu.Unlock()
			if !more {
				break
			}
		}
	}
}

// step reads the inbox, expires, cuts and dispatches what is due, and arms
// the timer. It reports whether the lane is done for good.
func (l *lane) step() (exit bool) {
	now := time.Now()
	l.drain()
	b := l.b
	closing := b.closing.Load()
	bc := l.bc
	if b.aborted.Load() { // shutdown's deadline passed: end whatever came in since
		for len(l.heap) > 0 {
			l.end(l.heap[0], ErrShutdown)
		}
	}
	for len(l.heap) > 0 && !l.heap[0].deadline.After(now) {
		l.end(l.heap[0], ErrDeadline)
	}
	waiting := false
	yielded := false
	for len(l.heap) > 0 {
		head, headP := l.best(now)
		send := closing || l.pm != nil ||
			len(l.heap) >= bc.MaxBatchSize ||
			(bc.MaxBatchTokens > 0 && l.tokens >= bc.MaxBatchTokens) ||
			!l.earliestDue().After(now)
		// A flush alone sends only the flushed calls: the others keep
		// waiting for their own triggers, so that one caller's flushes do
		// not cut other callers' batches short.
		l.onlyFlushed = false
		if fh := l.queues[qFlushed].head(); !send && fh != nil {
			send, l.onlyFlushed = true, true
			head = fh
			headP = head.req.Priority
		}
		if !send && len(l.heap) >= bc.MinBatchSize && l.partials.Load() == 0 {
			// An early send. Yield once first, so that producers already
			// runnable (woken by the last batch's results) join this batch
			// rather than the next: in a quiet system nobody is, and the
			// batch leaves at once.
			if !yielded && len(l.heap) < bc.MaxBatchSize {
				yielded = true
				runtime.Gosched()
				l.drain()
				continue
			}
			send = true
		}
		if !send {
			break
		}
		if l.pm == nil {
			w := waiter{l: l, p: headP, since: head.admitted, cost: l.plan(now)}
			if l.asked && w == l.askedAs {
				waiting = true // asked already; the grant comes as a message
				break
			}
			pm, wait, budget, err := l.be.ask(w)
			if err != nil {
				l.asked = false
				l.failover(func(*Call) bool { return true }, fmt.Errorf("%w: circuit open on backend %q", ErrNoBackend, l.be.name))
				continue
			}
			if pm == nil {
				l.asked, l.askedAs, waiting = true, w, true
				if wait > 0 {
					// Whoever the wait alone would take past its deadline
					// goes to a fallback, or fails now.
					limit := now.Add(wait)
					l.failover(func(c *Call) bool { return c.deadline.Before(limit) },
						&BudgetError{Backend: l.be.name, Budget: budget, Wait: wait})
				}
				break
			}
			l.asked = false
			l.pm = pm
		}
		l.cut(now)
	}
	if len(l.heap) == 0 {
		// Calls that left other than in a cut left tombstones, and
		// with no live call queued nothing would trim them.
		l.trim()
		if l.asked {
			l.be.drop(l) // nothing left to wait for
			l.asked = false
		}
	}
	var next time.Time
	if len(l.heap) > 0 {
		next = l.heap[0].deadline
		if !waiting {
			if due := l.earliestDue(); due.Before(next) {
				next = due
			}
		}
	}
	idle := len(l.heap) == 0

	for i, e := range l.ended {
		e.c.finish(Result{Err: e.err}, now)
		l.ended[i] = ending{}
	}
	l.ended = l.ended[:0]
	for i, c := range l.moved {
		b.enqueue(c)
		l.moved[i] = nil
	}
	l.moved = l.moved[:0]

	l.wake = time.Time{}
	if !idle {
		l.idleAt = time.Time{}
		l.idleSince.Store(0)
		l.timer.Reset(next.Sub(now))
		if !waiting {
			l.wake = next
		}
		return false
	}
	if l.pm != nil {
		l.be.giveBack(l.pm)
		l.pm = nil
	}
	if l.idleAt.IsZero() {
		l.idleAt = now
	}
	if l.idleSince.Load() == 0 {
		l.idleSince.Store(l.idleAt.UnixNano())
	}
	if l.evicted.Load() {
		l.be.drop(l)
		l.asked = false
		return true // closed and out of b.lanes already
	}
	if closing || !now.Before(l.idleAt.Add(b.cfg.idleLane)) {
		if l.close() {
			return true
		}
	}
	l.timer.Reset(l.idleAt.Add(b.cfg.idleLane).Sub(now))
	return false
}

// drain takes the inbox and applies its messages.
func (l *lane) drain() {
	l.inMu.Lock()
	in := l.inbox
	l.inbox = l.spare[:0]
	l.inMu.Unlock()
	for i := range in {
		l.handle(&in[i])
		in[i] = msg{}
	}
	l.spare = in
}

// handle applies one inbox message.
func (l *lane) handle(m *msg) {
	switch m.kind {
	case msgPush:
		c := m.c
		if !c.pending() { // ended before the owner saw it
			c.queued.Store(false)
			l.queuedBy[c.req.Priority].Add(-1)
			l.size.Add(-1)
			return
		}
		p := c.req.Priority
		c.qidx = uint8(p.level() + 1)
		if ahead := l.queues[c.qidx].push(l, c); ahead != nil && c.admitted.Before(ahead.admitted) {
			// Back from a retry or a fallback: due before calls queued
			// ahead of it, where earliestDue does not look.
			c.late = true
			if due := c.due(); l.lates == 0 || due.Before(l.lateDue) {
				l.lateDue = due
			}
			l.lates++
		}
		l.heap.push(c)
		l.tokens += c.tokens
	case msgForget:
		if c := m.c; l.holds(c) {
			l.heap.remove(c.heapIdx)
			l.dequeued(c, nil)
		}
	case msgGrant:
		// The backend dropped the wait it granted; a nil permit says that
		// its breaker opened: asking again fails over.
		l.asked = false
		switch {
		case m.pm == nil:
		case l.pm != nil || len(l.heap) == 0:
			l.be.giveBack(m.pm) // a second permit, or nothing to send
		default:
			l.pm = m.pm
		}
	case msgFlush:
		fw := m.fw
		var calls []*Call
		if fw.calls == nil {
			calls = slices.Clone(l.heap)
		} else {
			for _, c := range fw.calls {
				if l.holds(c) && c.pending() {
					calls = append(calls, c)
				}
			}
		}
		// In admission order, so that a flushed batch keeps it.
		slices.SortFunc(calls, func(a, b *Call) int { return a.admitted.Compare(b.admitted) })
		for _, c := range calls {
			l.markFlushed(c, fw)
		}
		fw.sent() // the count started at one: this message's own
	}
}

// holds reports whether c is in l's heap. Only the owner of the lane that
// holds c writes c.heapIdx, so it may be read only once c is known to be
// l's, and c.lane alone does not tell: c may have been cut from l, failed
// over and pushed to another lane since the message about it was sent.
// queued is read first. push stores lane before queued, and l cleared
// queued when c left it (a cut, an end, a forget or a failover), so a
// queued that reads true comes from a later push: the lane read next is
// that push's or a later one's, and the writes of the lane c was in
// before (its heapIdx = -1) happened before it. TestFlushRacesFallback
// races there under the race detector when holds reads lane alone.
func (l *lane) holds(c *Call) bool {
	return c.queued.Load() && c.lane.Load() == l && c.heapIdx >= 0
}

// markFlushed moves a queued call to the flushed queue, ahead of everyone,
// and makes fw wait for it unless nobody waits on fw.
func (l *lane) markFlushed(c *Call, fw *flushWait) {
	if !fw.unwaited {
		if l.flushOf == nil {
			l.flushOf = make(map[*Call][]*flushWait)
		}
		l.flushOf[c] = append(l.flushOf[c], fw)
		fw.left.Add(1)
	}
	if c.qidx != qFlushed {
		l.queues[c.qidx].kill(c)
		c.qidx = qFlushed
		l.queues[qFlushed].push(l, c)
	}
}

// dequeued books c's leaving the heap other than in a cut: its fifo entry
// becomes a tombstone, skipped and dropped later. A flush waiting on c is
// told now, or, when c leaves in run r, once r's upstream call starts.
func (l *lane) dequeued(c *Call, r *batchRun) {
	l.queues[c.qidx].kill(c)
	l.size.Add(-1)
	l.queuedBy[c.req.Priority].Add(-1)
	l.unqueue(c, r)
}

// unqueue is dequeued but for the shared counters (size and queuedBy),
// which a cut books once for the whole batch.
func (l *lane) unqueue(c *Call, r *batchRun) {
	c.heapIdx = -1
	if c.late {
		c.late = false
		l.lates--
	}
	c.queued.Store(false)
	l.tokens -= c.tokens
	if l.flushOf != nil {
		if ws, ok := l.flushOf[c]; ok {
			for _, fw := range ws {
				if r != nil {
					r.flushes = append(r.flushes, fw)
				} else {
					fw.sent()
				}
			}
			delete(l.flushOf, c)
			if len(l.flushOf) == 0 {
				l.flushOf = nil
			}
		}
	}
}

// end takes a queued call out to end with err after the step.
func (l *lane) end(c *Call, err error) {
	l.heap.remove(c.heapIdx)
	l.dequeued(c, nil)
	l.ended = append(l.ended, ending{c, err})
}

// close ends the lane when nothing arrived in the meantime: from then on
// producers look the lane up again and grants go straight back. It reports
// false when the lane got work.
func (l *lane) close() bool {
	b := l.b
	b.lanesMu.Lock()
	l.inMu.Lock()
	if len(l.inbox) > 0 {
		l.inMu.Unlock()
		b.lanesMu.Unlock()
		return false
	}
	l.closed = true
	if b.lanes[l.key] == l {
		delete(b.lanes, l.key)
		b.laneHolders.remove(l)
	}
	l.inMu.Unlock()
	b.lanesMu.Unlock()
	l.be.drop(l) // a stale wait, if any: its grant would come straight back
	l.asked = false
	return true
}

// failover takes the queued calls that match out of the lane: each moves
// to the route's next target, or, on the last one, ends with err.
func (l *lane) failover(match func(*Call) bool, err error) {
	last := int(l.key.target)+1 >= len(l.route.targets)
	for _, c := range slices.Clone(l.heap) {
		if !match(c) {
			continue
		}
		if last {
			if errors.Is(err, ErrBudgetExhausted) {
				l.be.stats.budgetFails.Add(1)
				l.be.log.budgetFailed(c, l.route.Name, err)
			}
			l.end(c, err)
			continue
		}
		l.heap.remove(c.heapIdx)
		l.dequeued(c, nil)
		l.be.stats.fallbacks.Add(1)
		l.be.log.fellBack(c, l.route.Name, l.key.target+1, err)
		c.target = l.key.target + 1
		l.moved = append(l.moved, c)
	}
}

// trim drops tombstones from the head of each flow, and the flows that
// are left empty (all but one per level).
func (l *lane) trim() {
	for p := range l.queues {
		lv := &l.queues[p]
		for i := 0; i < len(lv.flows); {
			f := lv.flows[i]
			for f.q.len() > 0 && f.q.peek() == nil {
				f.q.pop()
			}
			if f.q.len() == 0 && len(lv.flows) > 1 {
				lv.remove(l, i)
				continue
			}
			i++
		}
		if len(lv.flows) == 1 && lv.flows[0].q.len() == 0 {
			lv.vtime, lv.flows[0].finish = 0, 0 // nothing queued: start afresh
		}
	}
}

// rank orders calls for dispatch: lower goes first. A call climbs one
// priority for every aging step it has waited; flushed calls go first.
func (l *lane) rank(c *Call, q int, now time.Time) time.Duration {
	if q == qFlushed {
		return math.MinInt64
	}
	return time.Duration(q-1)*l.b.cfg.agingStep - now.Sub(c.admitted)
}

// before reports whether a goes before b at the same level: the smaller
// virtual finish time, then the earlier admission.
func before(a, b *Call) bool {
	return a.tag < b.tag || (a.tag == b.tag && a.admitted.Before(b.admitted))
}

// best trims the flows and returns the queued call that goes first and its
// priority. The lane must hold at least one call.
func (l *lane) best(now time.Time) (*Call, Priority) {
	l.trim()
	var best *Call
	var bestRank time.Duration
	for q := range l.queues {
		c := l.queues[q].head()
		if c == nil {
			continue
		}
		if r := l.rank(c, q, now); best == nil || r < bestRank || (r == bestRank && c.admitted.Before(best.admitted)) {
			best, bestRank = c, r
		}
	}
	return best, best.req.Priority
}

// earliestDue returns when the lane must send, from the queued calls'
// priority delays. A level's calls share a delay, so in each flow the
// first live call is due first, but for late ones: calls queued behind
// calls admitted after them (back from a retry or a fallback), which
// lateDue covers while any is queued. It may be earlier than the late
// calls still queued (it is kept, not recomputed, as they leave): the
// lane then sends sooner than it must, never later.
func (l *lane) earliestDue() time.Time {
	var due time.Time
	if l.lates > 0 {
		due = l.lateDue
	}
	for q := 1; q < numQueues; q++ {
		for _, f := range l.queues[q].flows {
			c := f.q.first()
			if c == nil {
				continue
			}
			if d := c.due(); due.IsZero() || d.Before(due) {
				due = d
			}
		}
	}
	return due
}

// order visits queued calls best first, while visit says yes: across
// levels best rank first, inside a level by weighted fair queuing (the
// smallest virtual finish time first). It leaves in each flow's passed how
// many entries it passed (tombstones included), so that a cut can pop
// exactly those.
func (l *lane) order(now time.Time, visit func(c *Call) bool) {
	for q := range l.queues {
		for _, f := range l.queues[q].flows {
			f.passed = 0
		}
	}
	for {
		var best *Call
		var bestF *flow
		var bestRank time.Duration
		for q := range l.queues {
			if l.onlyFlushed && q != qFlushed {
				break
			}
			var head *Call
			var headF *flow
			for _, f := range l.queues[q].flows {
				for f.passed < f.q.len() && f.q.at(f.passed) == nil {
					f.passed++ // a tombstone: skip
				}
				if f.passed == f.q.len() {
					continue
				}
				if c := f.q.at(f.passed); head == nil || before(c, head) {
					head, headF = c, f
				}
			}
			if head == nil {
				continue
			}
			if r := l.rank(head, q, now); best == nil || r < bestRank || (r == bestRank && head.admitted.Before(best.admitted)) {
				best, bestF, bestRank = head, headF, r
			}
		}
		if best == nil || !visit(best) {
			return
		}
		bestF.passed++
	}
}

// plan returns what the lane's next batch may cost, for the backend's
// budgets. Only a backend with rate budgets needs the exact figure, which
// takes a walk of the queue; others get a bound.
func (l *lane) plan(now time.Time) cost {
	bc := l.bc
	if !l.be.limitedA.Load() {
		return cost{requests: l.be.calls(l.route.Name, l.route.Op, min(len(l.heap), bc.MaxBatchSize)), tokens: l.tokens}
	}
	var got cost
	n := 0
	l.order(now, func(c *Call) bool {
		if !l.fits(n, got, c, cost{requests: math.MaxInt, tokens: math.MaxInt}) {
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
	bc := l.bc
	return n < bc.MaxBatchSize &&
		(bc.MaxBatchTokens == 0 || got.tokens+c.tokens <= bc.MaxBatchTokens) &&
		got.tokens+c.tokens <= caps.tokens &&
		l.be.calls(l.route.Name, l.route.Op, n+1) <= caps.requests
}

// cut takes the next batch off the queue within the held permit, settles
// the permit to it and hands both to the backend's workers.
func (l *lane) cut(now time.Time) {
	pm := l.pm
	l.pm = nil
	caps := cost{requests: math.MaxInt, tokens: math.MaxInt}
	if pm.rpm != nil {
		caps.requests = pm.requests
	}
	if pm.tpm != nil {
		caps.tokens = pm.tokens
	}
	r := l.newRun(pm, now)
	var got cost
	l.order(now, func(c *Call) bool {
		if !l.fits(len(r.calls), got, c, caps) {
			return false
		}
		r.calls = append(r.calls, c)
		got = cost{requests: l.be.calls(l.route.Name, l.route.Op, len(r.calls)), tokens: got.tokens + c.tokens}
		return true
	})
	for q := range l.queues {
		for _, f := range l.queues[q].flows {
			for range f.passed {
				f.q.pop()
			}
		}
	}
	l.heap.removeAll(r.calls)
	var by [numPriorities]int32
	for _, c := range r.calls {
		if lv := &l.queues[c.qidx]; c.tag > lv.vtime {
			lv.vtime = c.tag // the level's virtual time: the last finish served
		}
		by[c.req.Priority]++
		l.unqueue(c, r)
	}
	l.size.Add(-int32(len(r.calls)))
	for p, k := range by {
		if k > 0 {
			l.queuedBy[p].Add(-k)
		}
	}
	l.be.settle(pm, got)
	if r.partial = len(r.calls) < l.bc.MaxBatchSize; r.partial {
		l.partials.Add(1)
	}
	l.inFlight.Add(int32(len(r.calls)))
	l.b.track(r)
	l.be.startWorkers(l.b)
	l.be.work <- r // never blocks: there is room for every permit out
}

// level is one urgency level of a lane's queue: one flow (fifo) per
// tenant with calls queued there, served by weighted fair queuing
// (self-clocked: a call's virtual finish time is its flow's last one, or
// the level's virtual time if later, plus its estimated tokens over its
// tenant's weight; the smallest goes first, and the level's virtual time
// is the finish time of the last call cut). Without tenants a level holds
// one flow, a plain fifo. Flushed calls form a level of their own, fair
// between tenants in the same way, so that a tenant's flushes (every
// stream flushes its requests when it half-closes) do not put its flood
// ahead of the others.
//
// Flows are per tenant rather than shuffle-sharded (Kubernetes APF): the
// tenants are configured, so their number is bounded and small, and a
// flow of one's own isolates exactly, where shuffle sharding isolates with
// a probability. Owner-only.
type level struct {
	flows []*flow
	vtime float64
}

// flow is one tenant's fifo at one level.
type flow struct {
	t      *tenantState // the flow's tenant; nil: none
	q      fifo
	finish float64 // the virtual finish time of its last call queued
	passed int     // order's scratch: entries passed
}

// flowFor returns t's flow, making it if needed. A level whose one flow
// is empty gives it to t.
func (lv *level) flowFor(l *lane, t *tenantState) *flow {
	for _, f := range lv.flows {
		if f.t == t {
			return f
		}
	}
	if len(lv.flows) == 1 && lv.flows[0].q.len() == 0 {
		f := lv.flows[0]
		f.t, f.finish = t, 0
		return f
	}
	var f *flow
	if n := len(l.spareFlows); n > 0 {
		f = l.spareFlows[n-1]
		l.spareFlows[n-1] = nil
		l.spareFlows = l.spareFlows[:n-1]
	} else {
		f = &flow{}
	}
	f.t = t
	lv.flows = append(lv.flows, f)
	return f
}

// head returns the level's first call, or nil; tombstones at the heads
// must have been trimmed.
func (lv *level) head() *Call {
	var c *Call
	for _, f := range lv.flows {
		if f.q.len() > 0 && (c == nil || before(f.q.peek(), c)) {
			c = f.q.peek()
		}
	}
	return c
}

// push queues c in its tenant's flow with its virtual finish time. It
// returns the first call queued ahead of c in that flow, or nil.
func (lv *level) push(l *lane, c *Call) (ahead *Call) {
	f := lv.flowFor(l, c.tenant)
	ahead = f.q.first()
	f.finish = max(f.finish, lv.vtime) + float64(c.tokens)/c.tenant.weight()
	c.tag = f.finish
	c.entry = f.q.push(c)
	return ahead
}

// kill turns c's entry, in its tenant's flow, into a tombstone: the one
// entry of a queued call, which leaves the lane's heap other than in a
// cut (a cut pops the entries it takes). A call leaves no entry behind
// that could come alive again when it is queued anew, here or in another
// lane, after a retry or a fallback.
func (lv *level) kill(c *Call) {
	for _, f := range lv.flows {
		if f.t == c.tenant {
			f.q.kill(c.entry, c)
			return
		}
	}
}

// remove drops the empty flow i, keeping it for reuse.
func (lv *level) remove(l *lane, i int) {
	f := lv.flows[i]
	last := len(lv.flows) - 1
	lv.flows[i] = lv.flows[last]
	lv.flows[last] = nil
	lv.flows = lv.flows[:last]
	*f = flow{q: fifo{items: f.q.items[:0]}}
	l.spareFlows = append(l.spareFlows, f)
}

// fifo is a queue of calls backed by a slice that is reused once drained.
// An entry is nil once killed (a tombstone). Entries are numbered from
// the fifo's start (modulo 2³², far beyond any queue's length): off is
// the number of items[0].
type fifo struct {
	items []*Call
	head  int
	off   uint32
}

func (q *fifo) len() int       { return len(q.items) - q.head }
func (q *fifo) at(i int) *Call { return q.items[q.head+i] }
func (q *fifo) peek() *Call    { return q.items[q.head] }

// first returns the first call that is not a tombstone, or nil.
func (q *fifo) first() *Call {
	for _, c := range q.items[q.head:] {
		if c != nil {
			return c
		}
	}
	return nil
}

// push appends c and returns its entry's number.
func (q *fifo) push(c *Call) uint32 {
	q.items = append(q.items, c)
	return q.off + uint32(len(q.items)-1)
}

// kill makes entry e, which holds c, a tombstone.
func (q *fifo) kill(e uint32, c *Call) {
	if i := int(e - q.off); i >= q.head && i < len(q.items) && q.items[i] == c {
		q.items[i] = nil
	}
}

func (q *fifo) pop() {
	q.items[q.head] = nil
	q.head++
	switch {
	case q.head == len(q.items):
		q.off += uint32(len(q.items))
		q.items, q.head = q.items[:0], 0
	case q.head > 1024 && q.head*2 > len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.off += uint32(q.head)
		q.items, q.head = q.items[:n], 0
	}
}

// deadlineHeap orders queued calls by deadline, earliest first; it keeps
// Call.heapIdx. Its methods are container/heap's algorithms written for
// *Call, so that the owner's per-call pushes and removals make no
// interface calls.
type deadlineHeap []*Call

func (h deadlineHeap) less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

// push adds c.
func (h *deadlineHeap) push(c *Call) {
	c.heapIdx = len(*h)
	*h = append(*h, c)
	h.up(len(*h) - 1)
}

// remove takes out the call at index i.
func (h *deadlineHeap) remove(i int) {
	n := len(*h) - 1
	if n != i {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	old := *h
	old[n] = nil
	*h = old[:n]
}

// removeAll takes out calls, which are all in h. Taking many out by
// compacting and re-heaping costs O(len(h)), where one at a time costs
// O(len(calls)·log len(h)): it picks the cheaper.
func (h *deadlineHeap) removeAll(calls []*Call) {
	n := len(*h)
	if len(calls)*bits.Len(uint(n)) < n {
		for _, c := range calls {
			h.remove(c.heapIdx)
		}
		return
	}
	for _, c := range calls {
		c.heapIdx = -1
	}
	s := *h
	k := 0
	for _, c := range s {
		if c.heapIdx >= 0 {
			c.heapIdx = k
			s[k] = c
			k++
		}
	}
	clear(s[k:])
	s = s[:k]
	for i := k/2 - 1; i >= 0; i-- {
		s.down(i, k)
	}
	*h = s
}

func (h deadlineHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts the call at i0 down within the first n; it reports whether
// the call moved.
func (h deadlineHeap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 {
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
