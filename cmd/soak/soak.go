package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// llmsimFaults are llmsim's fault modes during the soak.
var llmsimFaults = []string{
	"-latency", "15ms", "-per-token", "200us",
	"-error-rate", "0.03", "-timeout-rate", "0.005", "-reset-rate", "0.01", "-malformed-rate", "0.01",
	"-pack-missing-rate", "0.02", "-pack-unparseable-rate", "0.02", "-seed", "7",
}

const soakConfig = `
listen: 127.0.0.1:0
queue_capacity: 2000
drain_timeout: 10s
backends:
  - name: llmsim
    type: openai
    max_concurrency: 32
    attempt_timeout: 3s
    openai:
      base_url: http://%s/v1
      timeout: 3s
      pack: {enabled: true, routes: [chat-packed], max_items: 8}
  - name: sim
    type: sim
    sim: {base_latency: 20ms}
routes:
  - {name: chat-packed, operation: chat, backend: llmsim, model: sim-chat, fallbacks: [{backend: sim}], batching: {max_batch_size: 8, window: 20ms}}
  - {name: chat, operation: chat, backend: llmsim, model: sim-chat, fallbacks: [{backend: sim}], batching: {max_batch_size: 8, window: 10ms}}
  - {name: completion, operation: completion, backend: llmsim, model: sim-completion, batching: {max_batch_size: 8, window: 10ms}}
  - {name: embedding, operation: embedding, backend: llmsim, model: sim-embedding, batching: {max_batch_size: 32, window: 10ms}}
`

// lateGrace is how far past its deadline a terminal result may arrive
// before it counts as late: the network and a loaded machine.
const lateGrace = time.Second

// soakStreams is how many SubmitStreams carry the stream traffic.
const soakStreams = 8

// tally counts outcomes; safe for concurrent use.
type tally struct {
	sentUnary, sentStream  atomic.Int64
	accepted               atomic.Int64
	ok                     atomic.Int64
	callerCancelled        atomic.Int64
	lost, late             atomic.Int64
	inflight               sync.WaitGroup
	mu                     sync.Mutex
	failed, refused        map[string]int // by gRPC code
	lostIDs, lateIDs       []string
	refusedIDs             []string
	cancelsSent, flushSent atomic.Int64
}

func (t *tally) add(m map[string]int, code codes.Code) {
	t.mu.Lock()
	m[code.String()]++
	t.mu.Unlock()
}

func (t *tally) note(list *[]string, id string) {
	t.mu.Lock()
	if len(*list) < 10 {
		*list = append(*list, id)
	}
	t.mu.Unlock()
}

// runSoak runs the soak and reports; false when a promise was broken.
func runSoak(ctx context.Context, dir, batcherdBin, llmsimBin string, load time.Duration, rate int) bool {
	sim, err := start("llmsim", llmsimBin, append([]string{"-addr", "127.0.0.1:0"}, llmsimFaults...), nil)
	if err != nil {
		fail(err)
	}
	defer func() { _ = sim.stop(10 * time.Second) }()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// llmsim logs its address at info; at warn it would not: ask for info.
	simAddr, err := sim.addr(actx, "llmsim listening")
	if err != nil {
		fail(err)
	}
	cfg := writeFile(dir, "soak.yaml", fmt.Sprintf(soakConfig, simAddr))
	bd, err := start("batcherd", batcherdBin, []string{"--config", cfg, "--log-format", "json",
		"--admin-listen", "127.0.0.1:0", "--pprof", "--http-listen", "127.0.0.1:0"}, nil)
	if err != nil {
		fail(err)
	}
	addr, err := bd.addr(actx, "listening")
	if err != nil {
		fail(err)
	}
	debug, err := bd.addr(actx, "admin listening")
	if err != nil {
		fail(err)
	}
	pid := bd.cmd.Process.Pid
	conn, err := dial(addr)
	if err != nil {
		fail(err)
	}
	defer func() { _ = conn.Close() }()
	c := client.New(conn)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	if _, err := c.Submit(wctx, client.Embed("embedding", "warm up")); err != nil {
		fail(fmt.Errorf("warm-up request: %w\n%s", err, bd.lastLines()))
	}
	wcancel()
	time.Sleep(2 * time.Second)
	atStart := sample{rss: rssMiB(pid), goroutines: goroutines(debug)}
	fmt.Printf("soak: batcherd and llmsim (faults: %s)\n", strings.Join(llmsimFaults, " "))
	fmt.Printf("load: %v at ~%d requests/s (unary and %d streams, all priorities, 5%% cancelled, flushes), 10 s quiet, 5 s more load, SIGTERM\n",
		load, rate, soakStreams)

	t := &tally{failed: map[string]int{}, refused: map[string]int{}}
	w := watch(pid, debug, time.Second)
	d := newDriver(ctx, c, t)
	d.run(load, rate)
	loadEnd := time.Now()
	waitOrTimeout(&t.inflight, 30*time.Second)
	d.closeStreams()
	time.Sleep(time.Until(loadEnd.Add(10 * time.Second)))
	after := sample{rss: rssMiB(pid), goroutines: goroutines(debug)}
	peak := w.end()

	// The end: load again, SIGTERM in its midst.
	d2 := newDriver(ctx, c, t)
	sigterm := make(chan error, 1)
	go func() {
		time.Sleep(5 * time.Second)
		d2.stop() // no new requests once the signal is on its way
		sigterm <- bd.stop(60 * time.Second)
	}()
	d2.run(time.Hour, rate)
	exitErr := <-sigterm
	waitOrTimeout(&t.inflight, 60*time.Second)
	d2.closeStreams()

	fmt.Printf("requests sent:       %d (%d unary, %d on streams; %d stream cancels, %d flushes)\n",
		t.sentUnary.Load()+t.sentStream.Load(), t.sentUnary.Load(), t.sentStream.Load(), t.cancelsSent.Load(), t.flushSent.Load())
	fmt.Printf("accepted:            %d\n", t.accepted.Load())
	fmt.Printf("  completed OK:      %d\n", t.ok.Load())
	fmt.Printf("  failed, by code:   %s\n", codesString(t.failed))
	fmt.Printf("  unary cancelled by the caller: %d\n", t.callerCancelled.Load())
	fmt.Printf("not accepted, by code: %s\n", codesString(t.refused))
	if len(t.refusedIDs) > 0 {
		fmt.Printf("  for example: %v\n", t.refusedIDs[:min(3, len(t.refusedIDs))])
	}
	fmt.Printf("accepted without a terminal result: %d %v\n", t.lost.Load(), t.lostIDs)
	fmt.Printf("late past their deadline (+%v): %d %v\n", lateGrace, t.late.Load(), t.lateIDs)
	fmt.Printf("batcherd: at start %v\n", atStart)
	fmt.Printf("          at peak  %v\n", peak)
	fmt.Printf("          10 s after the load %v\n", after)
	exit := "exit 0"
	if exitErr != nil {
		exit = exitErr.Error()
	}
	fmt.Printf("SIGTERM: batcherd %s; drain incomplete logged %d times, results delivered logged %d times\n", exit,
		bd.count("drain incomplete: the requests still pending were ended with UNAVAILABLE"), bd.count("results delivered"))
	return t.lost.Load() == 0 && t.late.Load() == 0 && exitErr == nil
}

func codesString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}

func waitOrTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// driver sends the traffic of one phase.
type driver struct {
	ctx     context.Context
	c       *client.Client
	t       *tally
	streams []*soakStream
	halt    chan struct{}
	once    sync.Once
	seq     atomic.Int64
}

type soakStream struct {
	s        *client.Stream
	accepted sync.Map // id -> true once Queued
}

var soakSeq atomic.Int64 // ids unique across phases

func newDriver(ctx context.Context, c *client.Client, t *tally) *driver {
	d := &driver{ctx: ctx, c: c, t: t, halt: make(chan struct{})}
	for range soakStreams {
		ss := &soakStream{}
		s, err := c.Stream(ctx, client.OnEvent(func(ev *batcherv1.Event) {
			if ev.GetQueued() != nil {
				ss.accepted.Store(ev.GetId(), true)
			}
		}))
		if err != nil {
			fail(fmt.Errorf("opening a stream: %w", err))
		}
		ss.s = s
		d.streams = append(d.streams, ss)
	}
	return d
}

func (d *driver) stop() { d.once.Do(func() { close(d.halt) }) }

// run paces requests at rate until dur passes or stop.
func (d *driver) run(dur time.Duration, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.NewTimer(dur)
	defer end.Stop()
	sem := make(chan struct{}, 1024) // bounds the client's own in-flight work
	for {
		select {
		case <-d.halt:
			return
		case <-end.C:
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // the client is saturated: skip a beat
		}
		n := d.seq.Add(1)
		d.t.inflight.Add(1)
		if n%5 < 2 {
			go func() { defer func() { <-sem; d.t.inflight.Done() }(); d.unary() }()
		} else {
			ss := d.streams[int(n)%len(d.streams)]
			go func() { defer func() { <-sem; d.t.inflight.Done() }(); d.stream(ss) }()
		}
	}
}

func (d *driver) closeStreams() {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	for _, ss := range d.streams {
		_ = ss.s.Close(ctx)
	}
}

// request builds a random request with a timeout.
func request(id string) (*batcherv1.Request, time.Duration) {
	timeout := time.Duration(2000+rand.IntN(6000)) * time.Millisecond
	prio := batcherv1.Priority(1 + rand.IntN(5))
	opts := []client.RequestOption{client.WithID(id), client.WithPriority(prio), client.WithTimeout(timeout)}
	text := fmt.Sprintf("soak request %s: %s", id, strings.Repeat("words ", rand.IntN(20)))
	switch rand.IntN(4) {
	case 0:
		return client.Chat("chat-packed", append(opts, client.User(text), client.WithMaxTokens(int32(4+rand.IntN(16))))...), timeout
	case 1:
		return client.Chat("chat", append(opts, client.System("be brief"), client.User(text), client.WithMaxTokens(int32(4+rand.IntN(16))))...), timeout
	case 2:
		return client.Complete("completion", text, append(opts, client.WithMaxTokens(int32(4+rand.IntN(16))))...), timeout
	}
	return client.Embed("embedding", text, opts...), timeout
}

// isRefusal: the server did not accept the request.
func isRefusal(st *status.Status) bool {
	switch st.Code() {
	case codes.ResourceExhausted, codes.InvalidArgument:
		return true
	case codes.Unavailable:
		return st.Message() == "server shutting down"
	}
	return false
}

// transportPrefixes begin the messages of the statuses that grpc-go's
// client transport makes itself. batcherd's own UNAVAILABLE messages
// ("upstream unreachable: ...", "server shut down ...") begin otherwise,
// even when they quote an upstream's "connection reset".
var transportPrefixes = []string{
	"connection error", "last connection error", "transport", "closing transport",
	"error reading from server", "the connection is draining", "EOF", "unexpected EOF",
}

// isTransport: the status was made by the client's transport, not sent by
// the server.
func isTransport(st *status.Status) bool {
	if st.Code() != codes.Unavailable {
		return false
	}
	for _, p := range transportPrefixes {
		if strings.HasPrefix(st.Message(), p) {
			return true
		}
	}
	return false
}

func (d *driver) unary() {
	id := fmt.Sprintf("u%d", soakSeq.Add(1))
	req, timeout := request(id)
	ctx, cancel := context.WithTimeout(d.ctx, timeout+5*time.Second)
	defer cancel()
	callerCancel := rand.IntN(20) == 0
	if callerCancel {
		go func() {
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
			cancel()
		}()
	}
	d.t.sentUnary.Add(1)
	sent := time.Now()
	_, err := d.c.Submit(ctx, req)
	took := time.Since(sent)
	st := status.Convert(err)
	switch {
	case err == nil:
		d.t.accepted.Add(1)
		d.t.ok.Add(1)
	case errors.Is(ctx.Err(), context.Canceled) && callerCancel:
		d.t.accepted.Add(1)
		d.t.callerCancelled.Add(1)
		return
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		d.t.accepted.Add(1)
		d.t.lost.Add(1)
		d.t.note(&d.t.lostIDs, id+" (no answer by its deadline+5s)")
		return
	case isRefusal(st):
		d.t.add(d.t.refused, st.Code())
		return
	case isTransport(st):
		d.t.accepted.Add(1)
		d.t.lost.Add(1)
		d.t.note(&d.t.lostIDs, id+" ("+st.Message()+")")
		return
	default:
		d.t.accepted.Add(1)
		d.t.add(d.t.failed, st.Code())
	}
	if took > timeout+lateGrace {
		d.t.late.Add(1)
		d.t.note(&d.t.lateIDs, fmt.Sprintf("%s (%v, timeout %v)", id, took.Round(time.Millisecond), timeout))
	}
}

func (d *driver) stream(ss *soakStream) {
	id := fmt.Sprintf("s%d", soakSeq.Add(1))
	req, timeout := request(id)
	ctx, cancel := context.WithTimeout(d.ctx, timeout+10*time.Second)
	defer cancel()
	d.t.sentStream.Add(1)
	sent := time.Now()
	h, err := ss.s.Send(ctx, req)
	if err != nil {
		d.t.add(d.t.refused, status.Code(err)) // the stream was closed or broken before sending
		return
	}
	if rand.IntN(40) == 0 {
		if ss.s.Flush(ctx) == nil {
			d.t.flushSent.Add(1)
		}
	}
	if rand.IntN(20) == 0 {
		go func() {
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
			// Not ctx: it ends when this request does, maybe while the
			// cancel is being written, and a write cut short aborts the
			// whole stream (client.Stream.Send's contract).
			cctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
			defer cancel()
			if h.Cancel(cctx) == nil {
				d.t.cancelsSent.Add(1)
			}
		}()
	}
	comp, err := h.Wait(ctx)
	took := time.Since(sent)
	_, accepted := ss.accepted.Load(id)
	switch {
	case comp != nil:
		d.t.accepted.Add(1)
		if comp.GetError() == nil {
			d.t.ok.Add(1)
		} else {
			d.t.add(d.t.failed, codes.Code(comp.GetError().GetCode()))
		}
		if took > timeout+lateGrace {
			d.t.late.Add(1)
			d.t.note(&d.t.lateIDs, fmt.Sprintf("%s (%v, timeout %v)", id, took.Round(time.Millisecond), timeout))
		}
	case accepted:
		d.t.accepted.Add(1)
		d.t.lost.Add(1)
		d.t.note(&d.t.lostIDs, fmt.Sprintf("%s (%v)", id, err))
	default:
		d.t.add(d.t.refused, status.Code(err))
		d.t.note(&d.t.refusedIDs, fmt.Sprintf("%s (%v)", id, err))
	}
}

// dial connects to batcherd as Batcher's Go client and batcherctl do
// (client.DialOptions): the caller's trace context propagated, and the
// client's fixed flow-control windows, made for streamed deltas, so that
// the soak's traffic is what Batcher's own clients send.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, client.DialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()))...)
}
