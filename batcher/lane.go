package batcher

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Queue indexes in lane.queues: flushed calls first, then one level per
// urgency.
const (
	qFlushed  = 0
	numQueues = numPriorities + 1
)

// msgKind is the kind of a message to a lane's owner.
type msgKind uint8

const (
	msgPush    msgKind = iota // queue c: sent as a push alone (lane.pushes), never as a msg
	msgForget                 // c ended: take it out of the queue
	msgGrant                  // the backend granted pm (nil pm: look at the backend again)
	msgRefused                // the backend refused the ask with err: its breaker is open, or a budget's wait
	msgFlush                  // send fw's calls now and answer when they are sent
)

type msg struct {
	kind msgKind
	// pushes is how many pushes came into the inbox before this message
	// (lane.pushes' length when it was sent): the owner applies those
	// first, so that the inbox keeps the order of its two halves.
	pushes int32
	c      *Call
	pm     *permit
	fw     *flushWait
	err    error
}

// flushWait is one Flush or FlushCalls waiting on one lane.
type flushWait struct {
	calls    []*Call      // nil: everything queued
	left     atomic.Int32 // flushed calls not yet sent or ended
	done     chan struct{}
	unwaited bool // nobody waits: the lane books none of its calls (newFlushWait)
	// then, if set, runs once fw is done: for an unwaited flush, once its
	// lane handled the message and reads calls no more (FlushCallsThen).
	then func()
}

// sent books one of fw's calls leaving: sent upstream, or ended.
func (fw *flushWait) sent() {
	if fw.left.Add(-1) == 0 {
		fw.finish()
	}
}

// finish ends the flush for its waiter.
func (fw *flushWait) finish() {
	close(fw.done)
	if fw.then != nil {
		fw.then()
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
// permit, to the backend's dispatch workers. It asks for a permit with a
// message to the backend's owner, and the permit comes back as a message.
// No backend call happens in the owner, and no goroutine start but one: a
// call it moves to the route's next target may need a lane that does not
// exist yet, and making a lane starts its owner (laneFor).
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

	// The inbox, guarded by inMu: the pushes, and every other message.
	// A push is a call pointer alone, 8 bytes where a msg is 48: the
	// producers' appends, the most frequent, write one cache line the
	// owner last read for eight calls instead of about one a call.
	inMu   sync.Mutex
	pushes []*Call
	inbox  []msg
	closed bool // the owner has exited: senders look the lane up again

	// grantsSent counts the grants the backend's owner sent the lane; only
	// that owner reads or writes it (askOwned, deliver).
	grantsSent uint32

	// Atomics, each with one writer named.
	nudged atomic.Bool // a wake-up is pending in trigger: producers set, owner clears
	// sleepUntil is when the owner's timer wakes it while it sleeps with
	// calls queued, 0 while it is awake or idle: written by the owner,
	// read by producers to skip nudges it does not need. It is a mono on
	// the Batcher's clock, as the calls' due times and deadlines it is
	// compared with: all three on the monotonic clock, so that a step of
	// the wall clock cannot set them apart.
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
	sparePushes []*Call                // the pushes' other half
	queues      [numQueues]level       // flushed, then by urgency; may hold tombstones (nil)
	spareFlows  []*flow                // flows to reuse
	heap        deadlineHeap           // every queued call, earliest deadline first
	tokens      int                    // their estimated tokens
	pm          *permit                // a permit held for the next cut
	asked       bool                   // registered as a waiter with the backend
	askedAs     waiter                 // what it asked for
	grantsSeen  uint32                 // grants received (msgGrant), sent with each ask
	onlyFlushed bool                   // the next cut takes flushed calls only
	lates       int                    // queued calls marked late (see earliestDue)
	lateDue     mono                   // no later than the earliest due of those, while any
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
	m.pushes = int32(len(l.pushes))
	l.inbox = append(l.inbox, m)
	l.inMu.Unlock()
	l.nudge()
	return true
}

// push queues c. It reports false when the lane is closed. Once c is in
// the inbox it is the owner's: it may be batched, delivered and (Do's)
// reused at once, so push reads what it needs of c before.
func (l *lane) push(c *Call) bool {
	due, deadline := int64(c.due()), int64(c.deadline)
	p := c.prio
	// The shared counts go up before the lock, so that it is held for the
	// append alone: every producer of the lane takes it, and at 512
	// producers their waits for it were nearly all of BenchmarkCore's
	// mutex delay. A count ahead of its push keeps the lane from being
	// evicted (evictIdleLocked reads size under inMu), shows in Lanes a
	// moment early and may cost the owner a nudge too many; a closed
	// lane's are taken back.
	l.queuedBy[p].Add(1) // counted from the push, so Lanes sees it at once
	l.size.Add(1)
	if h := l.b.testHookPushCounted; h != nil {
		h()
	}
	l.inMu.Lock()
	if l.closed {
		l.inMu.Unlock()
		l.size.Add(-1)
		l.queuedBy[p].Add(-1)
		return false
	}
	// queued is set before the message is seen: a finish from now on sends
	// a forget after it, and the owner drops c if it ended before.
	c.lane.Store(l)
	c.queued.Store(true)
	l.pushes = append(l.pushes, c)
	l.inMu.Unlock()
	// The size is read again after the append, not taken from the count:
	// counts and appends need not come in the same order, and a push
	// counted earlier but appended later than the one that woke the
	// owner for a full batch would otherwise see its own, smaller count
	// and leave the owner asleep with the batch full (until its window).
	// Read now, it covers every call in the inbox, c included.
	if l.wakeFor(due, deadline, l.size.Load()) {
		l.nudge()
	}
	return true
}

// wakeFor reports whether a push of a call due at due with the given
// deadline (monos), making size calls queued or on their way, needs the
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

// grant hands the lane a permit from its backend's owner. It reports false
// when the lane is closed: the owner takes the permit back, so that no
// permit is ever stranded.
func (l *lane) grant(pm *permit) bool { return l.send(msg{kind: msgGrant, pm: pm}) }

// refuse tells the lane that its backend's owner refused its ask: err wraps
// ErrNoBackend (the breaker is open) or is a *BudgetError (a rate budget
// alone makes it wait that long).
func (l *lane) refuse(err error) { l.send(msg{kind: msgRefused, err: err}) }

// flush asks the owner to send fw's calls now. A closed lane holds none.
func (l *lane) flush(fw *flushWait) {
	if !l.send(msg{kind: msgFlush, fw: fw}) {
		fw.finish()
	}
}
