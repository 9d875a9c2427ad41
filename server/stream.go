package server

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SubmitStream multiplexes many requests over one stream. See the proto for
// the contract; in short: every accepted request gets exactly one
// Completion, every refused message one Rejection, and the stream ends once
// every accepted request is terminal (after the caller half-closes or the
// server shuts down) or at once when the caller goes away, cancelling what
// it had in flight. When a shutdown ends the stream, a request the caller
// sent that got neither a Completion nor a Rejection was never accepted.
// When the caller's credential is revoked (WithAccessFunc), new requests
// get an UNAUTHENTICATED Rejection, and the stream ends UNAUTHENTICATED,
// after a final summary, once every accepted request is terminal.
func (s *Server) SubmitStream(gs batcherv1.BatcherService_SubmitStreamServer) error {
	if err := s.enterStream(); err != nil {
		return err
	}
	defer s.exitStream()
	st := &stream{
		s:          s,
		gs:         gs,
		ctx:        gs.Context(),
		access:     s.accessOf(gs.Context()),
		refused:    refusalsOf(gs.Context()),
		conn:       connOf(gs.Context()),
		windowWake: make(chan struct{}, 1),
		nudge:      make(chan struct{}, 1),
		ready:      make(chan struct{}),
		stopped:    make(chan struct{}),
		items:      itemMaps.Get().(map[string]*item),
		// The first message may change it.
		interval: s.cfg.interval,
	}
	st.turn.wake = make(chan struct{}, 1)
	st.sends.probes = probesWork(st.ctx)
	st.allEvents.Store(true)
	defer s.trackStream(st)()
	return st.run()
}

// stream is one SubmitStream; each of its requests (item) is an EventSink that
// hands its events to the stream (onEvent).
//
// Three parties meet here. The handler goroutine (run) is the stream's only
// sender. One receiver goroutine (receive) reads messages in order and
// submits requests to the core. The core's goroutines call onEvent. The
// receiver and onEvent only append to out under mu and nudge the sender
// through the capacity-1 nudge channel; the sender swaps out and sends
// outside the lock, so onEvent never blocks on the network.
//
// A request's end takes no lock: onEvent pushes the item, its Completion
// filled, on the ended stack, and the sender takes the whole stack and does
// the books (items, the counts) under mu in take. The core ends a batch's
// requests one after another on one goroutine, so a wait there for mu (held
// by the stream's receiver or sender, perhaps paused by the scheduler)
// holds up the rest of the batch: in a mutex profile of
// BenchmarkGRPCAlone/batcher/stream, onEvent's waits were 13% of all.
//
// Window: the receiver takes a window token (owed) before each Recv. A
// message that is answered (a request by its Completion or Rejection, any
// other message by its Rejection) keeps the token until the sender has sent
// that answer; any other message gives it back at once. So while the
// window is full nobody reads the stream and gRPC flow control pushes back
// on the caller, and out never holds more than a window of answers. The
// tokens are a counter, not a channel's buffer: a channel cost each
// message a three-way select to take its token and a receive to give it
// back.
type stream struct {
	s      *Server
	gs     batcherv1.BatcherService_SubmitStreamServer
	ctx    context.Context
	access *batcher.Access // the caller's, found once; admits each request
	// refused holds the requests the codec refused before the receiver
	// saw them (codec.go), the stream's own; nil without the codec.
	refused *refusals
	conn    net.Addr // the caller's connection (connOf), found once
	// owed counts the window tokens taken: received messages still owed
	// an answer. Only the receiver adds (takeWindow); anyone gives back
	// (returnWindow), and whoever takes it down from full wakes the
	// receiver through windowWake (capacity 1).
	owed       atomic.Int64
	windowWake chan struct{}
	nudge      chan struct{} // capacity 1: out has news for the sender
	ready      chan struct{} // closed by the receiver once the first message is handled
	stopped    chan struct{} // closed by the sender when the stream ends

	// Receiver-owned; interval is read by the sender once ready is closed.
	interval  time.Duration
	allEvents atomic.Bool // progress events wanted (read by OnEvent)

	held atomic.Int64 // server-wide budget tokens held, one per window token (limits.go)
	turn budgetTurn   // the receiver's turn for a budget token (limits.go)
	// gone mirrors closed for the receiver's budget check, which runs per
	// message and so takes no lock: set by close before it drops the budget.
	gone atomic.Bool

	// ended is a stack of the items whose requests ended (onEvent pushes,
	// linked by item.next); the sender takes it whole (take). nEnded
	// counts its Completions for StreamStats.
	ended  atomic.Pointer[item]
	nEnded atomic.Int64

	// free is a stack of the stream's own cleared items (reuse pushes,
	// linked by item.next); the receiver takes it whole into spare, which
	// is the receiver's, and takes its items from there (newItem). nFree
	// counts both, give or take the pushes under way.
	free  atomic.Pointer[item]
	spare *item
	nFree atomic.Int32

	sends streamSends // every Send; the sender's and straight deltas (streamsend.go)

	mu        sync.Mutex
	out       []*batcherv1.SubmitStreamResponse // to send, in order
	streaming []*batcher.Call                   // streamed requests with deltas waiting (sent before out)
	spareStr  []*batcher.Call                   // streaming's other buffer, sender-owned between takes
	items     map[string]*item                  // accepted (or being submitted) and not yet taken ended, by id
	peak      int                               // the most items has held (leave)
	left      atomic.Int32                      // the sender and the receiver that are done with items (leave)
	closed    bool                              // the sender is gone: drop messages, cancel late admissions
	recvDone  bool                              // the receiver stopped reading
	recvErr   error                             // why, when it was not a half-close
	firstErr  *status.Status                    // a bad first message: end at once
	revoked   bool                              // the caller's credential was revoked: end once items is empty
	submitted int64
	completed int64 // counted when the sender takes them, as failed
	failed    int64
	rejected  int64

	// Sender-owned.
	lastTerm  int64     // completed+failed at the previous summary
	lastSumAt time.Time // time of the previous summary
}

// item is one request of the stream, its EventSink, the core's slots for
// its result and its Call, and the Completion the stream answers it with,
// in one block (the Call apart, see slot). req is what the core holds;
// done is filled at the request's end (onEvent). Items come from the
// stream's free items or the server's spare ones (newItem) and go back
// once nobody holds them (refs): the sender has sent done, the core let
// go of the call (batcher.CallHolder's CallReleased, which follows an
// EventDone with Released: the request ended with its batch's answer) and
// the receiver is done with it (it stored call). A stream's request then
// allocates nothing here (BenchmarkGRPCStream). An item the core may
// still read (a request cancelled, timed out or ended by a shutdown) is
// never released and is left to the garbage collector, its Completion
// and its Call with it.
type item struct {
	req batcher.Request
	st  *stream
	// call is the core's call: nil while core.Submit runs. The receiver
	// stores it without the stream's lock, then reads gone; close sets
	// gone, then reads call: one of the two cancels it (request). The
	// receiver touches the item no more once it stored call.
	call atomic.Pointer[batcher.Call]
	// next links the ended stack (stream.ended): set by onEvent before the
	// push, read by the sender after it took the stack; and, once the item
	// is cleared, the stream's free items (stream.free).
	next *item
	// refs counts who holds a submitted item: the sender until it has
	// sent done, the core until CallReleased, the receiver until it
	// stored call, and the receiver again for each use of call outside mu
	// (pin), until a flush of it is handled (flushOwn). Whoever drops the
	// last puts the item back (unref).
	refs atomic.Int32
	// slot is the Call the core builds the request's call in
	// (CallSlot); it stays with the item when the item is reused. The
	// receiver sets it; whoever puts the item back reads it.
	slot *batcher.Call
	res  batcher.Result   // the core's result slot (ResultSlot)
	done streamCompletion // filled by onEvent; the sender's once pushed
}

// spareItems holds the streams' cleared items between streams: a
// stream takes from it when it has none of its own free, and puts its own
// back when it ends. It keeps at most max (the server-wide budget of
// answers owed, which bounds the items in flight on all streams at once),
// so what it retains is bounded; a sync.Pool kept missing, since every
// garbage collection empties one over two cycles, and under load one runs
// every few thousand requests.
type spareItems struct {
	mu   sync.Mutex
	head *item // linked by item.next
	n    int
	max  int
}

// get returns a cleared item, from the store or new.
func (p *spareItems) get() *item {
	p.mu.Lock()
	it := p.head
	if it != nil {
		p.head, it.next = it.next, nil
		p.n--
	}
	p.mu.Unlock()
	if it == nil {
		it = new(item)
	}
	return it
}

// put keeps the cleared items of list (linked by next) while there is
// room; the rest are the garbage collector's.
func (p *spareItems) put(list *item) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for it := list; it != nil && p.n < p.max; {
		next := it.next
		it.next = p.head
		p.head = it
		p.n++
		it = next
	}
}

// itemMaps holds the items maps (stream.items) of ended streams, empty,
// for the streams to come: a stream's map grows as its requests come in,
// six times on the way to a hundred in flight, and a stream of a few
// hundred requests paid for that growth on each of them.
var itemMaps = sync.Pool{New: func() any { return make(map[string]*item) }}

// maxPooledItems bounds the peak size of the items maps kept in itemMaps:
// clearing a map costs as much as its largest size, and a pooled map keeps
// its room.
const maxPooledItems = 1024

// leave is called by the sender and the receiver once each is done with
// items; the second gives the map to itemMaps. Nobody else reads it.
func (st *stream) leave() {
	if st.left.Add(1) < 2 {
		return
	}
	m := st.items
	st.items = nil
	if st.peak > maxPooledItems {
		return
	}
	clear(m)
	itemMaps.Put(m)
}

// maxFreeItems bounds a stream's own free items (stream.free); items past
// it go to the server's spare items.
const maxFreeItems = 64

// newItem returns a cleared item of st: one of its own free items, else
// one of the server's spare ones. Only the receiver calls it.
func (st *stream) newItem() *item {
	if st.spare == nil {
		st.spare = st.free.Swap(nil)
	}
	it := st.spare
	if it != nil {
		st.spare = it.next
		it.next = nil
		st.nFree.Add(-1)
	} else {
		it = st.s.items.get()
	}
	it.st = st
	return it
}

// unref drops one hold on a submitted item (refs); the last puts it back.
func (it *item) unref() {
	if it.refs.Add(-1) == 0 {
		it.st.reuse(it)
	}
}

// reuse puts it back among st's free items (past maxFreeItems, among
// the server's) when nobody but the caller can reach it any more: it was
// never submitted, or nobody holds it (refs). Its Call slot goes with
// it.
func (st *stream) reuse(it *item) {
	*it = item{slot: it.slot}
	if st.nFree.Load() >= maxFreeItems {
		st.s.items.put(it)
		return
	}
	st.nFree.Add(1)
	for {
		head := st.free.Load()
		it.next = head
		if st.free.CompareAndSwap(head, it) {
			return
		}
	}
}

// spillFree gives the stream's free items that list and the free stack
// hold to the server, for the streams to come. The sender calls it as it
// returns, the receiver (with its spare) as it does: neither puts an item
// back afterwards. The core may (CallReleased, a request ending after
// the sender left): such an item stays on the stack, for the garbage
// collector.
func (st *stream) spillFree(list *item) {
	st.s.items.put(list)
	st.s.items.put(st.free.Swap(nil))
}

// OnEvent implements batcher.EventSink for the stream (onEvent).
func (it *item) OnEvent(ev *batcher.Event) { it.st.onEvent(it, ev) }

// WantsProgress implements batcher.ProgressFilter for the stream.
func (it *item) WantsProgress() bool { return it.st.WantsProgress() }

// ResultSlot implements batcher.ResultHolder: the core keeps the
// request's result in the item, which is pooled with it.
func (it *item) ResultSlot() *batcher.Result { return &it.res }

// CallSlot implements batcher.CallHolder: the core builds the request's
// Call in the item's slot, which is pooled with it. Only the receiver's
// Submit asks.
func (it *item) CallSlot() *batcher.Call {
	if it.slot == nil {
		it.slot = new(batcher.Call)
	}
	return it.slot
}

// CallReleased implements batcher.CallHolder: the core's hold on the item
// ends.
func (it *item) CallReleased() { it.unref() }

// DeltasReady implements batcher.DeltaNotifier for the stream.
func (it *item) DeltasReady(c *batcher.Call) { it.st.DeltasReady(c) }

// run is the sender loop; it returns the stream's status.
func (st *stream) run() error {
	// The receiver counts as part of the stream until it returns, so that
	// Deliver (and Shutdown) wait for it: it may still hold a budget token
	// it took as the stream closed, which it gives back on its way out. It
	// returns soon after the handler: gRPC cancels the stream's context.
	st.s.streams.Add(1) // the handler's count is held: never 0 here
	go func() {
		defer st.s.streams.Done()
		defer st.leave()
		st.receive()
	}()
	defer st.leave() // after close, which reads items
	defer st.close()
	defer st.stopSends()
	defer st.spillFree(nil)

	st.lastSumAt = time.Now()
	ticker := time.NewTicker(st.s.cfg.interval)
	defer ticker.Stop()
	ready, closing := st.ready, st.s.closing
	var revoked <-chan struct{}
	if st.access != nil {
		revoked = st.access.Revoked // nil: never
	}
	shutting := false
	var buf []*batcherv1.SubmitStreamResponse // out's other buffer
	for {
		select {
		case <-revoked:
			// New requests are refused by Admit from now on; the stream
			// ends once what it accepted is done.
			revoked = nil
			st.mu.Lock()
			st.revoked = true
			st.mu.Unlock()
		case <-st.nudge:
		case <-ready:
			ready = nil
			if st.interval != st.s.cfg.interval {
				ticker.Reset(st.interval)
			}
		case now := <-ticker.C:
			st.sends.mu.Lock()
			err := st.sendLocked(st.summary(now, false), true)
			st.sends.mu.Unlock()
			if err != nil {
				return err
			}
		case <-closing:
			closing, shutting = nil, true
		case <-st.ctx.Done():
			return status.FromContextError(st.ctx.Err()).Err()
		}
		if end, err := st.sendTake(shutting, &buf); end {
			return err
		}
	}
}

// sendTake takes what waits (take) and sends it, sends.mu held
// throughout (streamSends): the deltas first, every delta of a request
// before its Completion (the core notifies before it ends the call; see
// DeltasReady), then out, then the Completions of the requests that
// ended, oldest first, each item going back once its Completion is sent.
// end says the stream ends, with err.
func (st *stream) sendTake(shutting bool, buf *[]*batcherv1.SubmitStreamResponse) (end bool, err error) {
	st.sends.mu.Lock()
	defer st.sends.mu.Unlock()
	msgs, done, streaming, end, final, endErr := st.take(shutting, *buf)
	if err := st.sendDeltas(streaming); err != nil {
		return true, err
	}
	answered := 0
	for i, m := range msgs {
		if err := st.sendLocked(m, done == nil && i == len(msgs)-1 && !final); err != nil {
			return true, err
		}
		switch m.Kind.(type) {
		case *batcherv1.SubmitStreamResponse_Completion, *batcherv1.SubmitStreamResponse_Rejection:
			answered++
		}
		msgs[i] = nil
	}
	for it := done; it != nil; {
		next := it.next
		if err := st.sendDoneLocked(it, next == nil && !final); err != nil {
			return true, err
		}
		answered++
		it.unref()
		it = next
	}
	// One release for the lot: the receiver, and the streams waiting
	// on the server-wide budget, wake once per take, not per message.
	st.releaseN(answered)
	*buf = msgs[:0]
	if !end {
		return false, nil
	}
	if final {
		if err := st.sendLocked(st.summary(time.Now(), true), false); err != nil {
			return true, err
		}
	}
	return true, endErr
}

// take swaps out the messages to send for buf, the sender's drained
// buffer, takes the items whose requests ended (done, oldest first, linked
// by next), and says whether the stream ends after them, whether a final
// summary is owed, and the stream's status. Once no request is in flight
// and nothing more can be accepted, no message can be added to out, so out
// is the last of them.
//
// The Completions of the requests that ended go last, after out and the
// deltas: the stack is taken before the lock, so that every event and
// delta a request had before its end is in this take too.
func (st *stream) take(shutting bool, buf []*batcherv1.SubmitStreamResponse) (msgs []*batcherv1.SubmitStreamResponse, done *item, ready []*batcher.Call, end, final bool, err error) {
	ended := st.ended.Swap(nil)
	st.mu.Lock()
	defer st.mu.Unlock()
	msgs = st.out
	if !st.closed {
		st.out = buf
	}
	ready, st.streaming, st.spareStr = st.streaming, st.spareStr, nil
	if ended != nil {
		var n int64
		done, n = st.endedLocked(ended)
		st.nEnded.Add(-n)
	}
	switch {
	case st.firstErr != nil: // nothing was accepted: no summary owed
		return msgs, done, ready, true, false, st.firstErr.Err()
	case len(st.items) > 0:
		return msgs, done, ready, false, false, nil
	case st.recvDone:
		return msgs, done, ready, true, true, st.recvErr
	case st.revoked:
		return msgs, done, ready, true, true, status.Error(grpccodes.Unauthenticated, "unauthenticated: credential revoked")
	case shutting:
		return msgs, done, ready, true, true, status.Error(grpccodes.Unavailable, "server shutting down")
	}
	return msgs, done, ready, false, false, nil
}

// endedLocked does the books of the ended stack's items (newest first)
// and returns them oldest first, linked by next, and how many there are.
func (st *stream) endedLocked(ended *item) (oldest *item, n int64) {
	for it := ended; it != nil; n++ {
		next := it.next
		st.answeredLocked(it)
		it.next = oldest // reversed in place
		oldest = it
		it = next
	}
	return oldest, n
}

// answeredLocked does the books of it, whose Completion is being sent
// (endedLocked): out of items, counted completed or failed, as
// the summaries read them. mu is held.
func (st *stream) answeredLocked(it *item) {
	if st.items[it.req.ID] == it {
		delete(st.items, it.req.ID)
	}
	if it.done.c.c.Error == nil {
		st.completed++
	} else {
		st.failed++
	}
}

// summary builds a StreamSummary; only the sender calls it.
func (st *stream) summary(now time.Time, final bool) *batcherv1.SubmitStreamResponse {
	st.mu.Lock()
	sum := &batcherv1.StreamSummary{
		Time:      timestamppb.New(now),
		Submitted: st.submitted,
		InFlight:  st.submitted - st.completed - st.failed,
		Completed: st.completed,
		Failed:    st.failed,
		Rejected:  st.rejected,
		Final:     final,
	}
	term := st.completed + st.failed
	st.mu.Unlock()
	if el := now.Sub(st.lastSumAt).Seconds(); el > 0 {
		sum.Throughput = float64(term-st.lastTerm) / el
	}
	st.lastTerm, st.lastSumAt = term, now
	return &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Summary{Summary: sum}}
}

// close ends the stream: late messages are dropped and every request still
// in flight is cancelled, so nothing stays pending in the core.
func (st *stream) close() {
	st.mu.Lock()
	st.closed = true
	st.gone.Store(true)
	st.out = nil
	var calls []*batcher.Call
	for _, it := range st.items {
		if c := it.call.Load(); c != nil {
			calls = append(calls, c)
		}
	}
	st.mu.Unlock()
	st.dropAllBudget() // its answers will never be sent
	for _, c := range calls {
		c.Cancel()
	}
	close(st.stopped)
}

// release gives back a window token and its server-wide budget token.
func (st *stream) release() { st.releaseN(1) }

// releaseN gives back n window tokens and their server-wide budget tokens.
func (st *stream) releaseN(n int) {
	st.dropBudgetN(st.returnWindow(int64(n)))
}

// takeWindow takes a window token for the receiver's next message,
// waiting while the window is full; false when the stream ends first.
func (st *stream) takeWindow() bool {
	window := int64(st.s.cfg.window)
	for {
		if st.owed.Load() < window {
			st.owed.Add(1) // only the receiver adds: still at most window
			return true
		}
		select {
		case <-st.windowWake:
		case <-st.stopped:
			return false
		case <-st.ctx.Done():
			return false
		}
	}
}

// returnWindow gives back n window tokens, or as many as are taken, and
// returns how many it gave back. Taking the count down from full wakes
// the receiver, which waits only once it has seen it full.
func (st *stream) returnWindow(n int64) int64 {
	for {
		o := st.owed.Load()
		k := min(o, n)
		if k <= 0 {
			return 0
		}
		if st.owed.CompareAndSwap(o, o-k) {
			if o >= int64(st.s.cfg.window) {
				select {
				case st.windowWake <- struct{}{}:
				default:
				}
			}
			return k
		}
	}
}

// push queues a message for the sender. The caller holds mu.
func (st *stream) pushLocked(m *batcherv1.SubmitStreamResponse) {
	if !st.closed {
		st.out = append(st.out, m)
	}
}

func (st *stream) wake() {
	select {
	case st.nudge <- struct{}{}:
	default:
	}
}

// WantsProgress implements batcher.ProgressFilter: a stream that asked for
// completions only is sent no progress events. Only the first message sets
// it, before any request.
func (st *stream) WantsProgress() bool { return st.allEvents.Load() }

// onEvent is the EventSink of the stream's item it: it copies the event
// into a message for the sender and never blocks.
func (st *stream) onEvent(it *item, ev *batcher.Event) {
	if ev.Kind != batcher.EventDone { // a progress event: wanted (WantsProgress)
		e := event(ev)
		if e == nil {
			return
		}
		m := &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Event{Event: e}}
		st.mu.Lock()
		st.pushLocked(m)
		st.mu.Unlock()
		st.wake()
		return
	}
	sc := &it.done // EventDone comes once
	sc.k.Completion = sc.c.fill(ev.Request, ev.Result)
	sc.r.Kind = &sc.k
	// No lock (see stream). Counted before the push, so that the count
	// never goes below 0.
	st.nEnded.Add(1)
	for {
		head := st.ended.Load()
		it.next = head
		if st.ended.CompareAndSwap(head, it) {
			break
		}
	}
	st.wake()
}

// streamCompletion is a stream's Completion message and what it points to.
type streamCompletion struct {
	r batcherv1.SubmitStreamResponse
	k batcherv1.SubmitStreamResponse_Completion
	c completionMsg
}
