package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/internal/upstream"
	"github.com/batcherhq/batcher/llmsim"
	"github.com/batcherhq/batcher/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"
)

// Issue 28's figures: token streaming through batcherd against straight to
// llmsim, in the same run.
//
// llmsim runs behind a tap (chunkTap) that timestamps each chunk of an
// answer as llmsim flushes it, keyed by the chat's prompt: in this process,
// or in one of its own (rigOpts.simApart). The direct load reads llmsim's
// server-sent events itself; the load through Batcher calls SubmitStreamed
// on batcherd's stack (setupBatcherd: security, metrics, otelgrpc, the
// worker pool) whose core has an openai backend pointed at llmsim, from
// connections dialled as Batcher's Go client dials them (client.DialOptions):
// the figures through Batcher are those of its Go client as shipped. Each
// delta's delivery is the time from llmsim's flush of a chunk to the
// client's receipt of the first delta that holds its text (a delta may
// join several chunks when its sender is behind).

const (
	streamTTFT      = 100 * time.Millisecond // llmsim's time to first token
	streamPerToken  = 10 * time.Millisecond  // and per token after
	streamReply     = 40                     // tokens of a full answer
	streamMaxTokens = 256
)

// chunkTap wraps llmsim and records, per prompt, when each chunk of a
// streamed answer was flushed and the answer's text length by then. hold,
// while set, stops every answer after its first content chunk until it is
// closed (the memory figure holds streams mid-answer).
type chunkTap struct {
	next http.Handler
	mu   sync.Mutex
	by   map[string][]tapChunk
	arr  map[string]time.Time // when each answer's request arrived
	hold chan struct{}
	held sync.WaitGroup // answers stopped at hold
}

// holdNext holds the next n answers after their first content chunk, and
// returns what lets them go on; wait returns once all n are held.
func (t *chunkTap) holdNext(n int) (wait, release func()) {
	hold := make(chan struct{})
	t.mu.Lock()
	t.hold = hold
	t.mu.Unlock()
	t.held.Add(n)
	return t.held.Wait, func() {
		t.mu.Lock()
		t.hold = nil
		t.mu.Unlock()
		close(hold)
	}
}

type tapChunk struct {
	at  time.Time
	cum int // the answer's text bytes up to and with this chunk
}

func (t *chunkTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	key := ""
	if n := len(req.Messages); n > 0 {
		key = req.Messages[n-1].Content
	}
	t.mu.Lock()
	t.arr[key] = arrived
	hold := t.hold
	t.mu.Unlock()
	tw := &tapWriter{ResponseWriter: w, tap: t, key: key, hold: hold}
	t.next.ServeHTTP(tw, r)
}

// tapWriter is one answer's writer: Write notes the chunk's text, Flush
// stamps it.
type tapWriter struct {
	http.ResponseWriter
	tap     *chunkTap
	key     string
	cum     int
	pending bool
	hold    chan struct{}
	waited  bool
}

func (w *tapWriter) Write(p []byte) (int, error) {
	if data, ok := bytes.CutPrefix(p, []byte("data: ")); ok {
		if n := contentLen(data); n > 0 {
			if w.hold != nil && !w.waited && w.cum > 0 {
				w.waited = true
				w.tap.held.Done()
				<-w.hold
			}
			w.cum += n
			w.pending = true
		}
	}
	return w.ResponseWriter.Write(p)
}

// contentLen returns the length of a chunk's choices[0].delta.content.
// The tap runs on both paths, so it reads the text without a JSON decode
// where it can (llmsim writes `"delta":{"content":"…"}` and no other
// "content"), to weigh on neither path's figures.
func contentLen(data []byte) int {
	const key = `"delta":{"content":"`
	if i := bytes.Index(data, []byte(key)); i >= 0 {
		rest := data[i+len(key):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 && bytes.IndexByte(rest[:j], '\\') < 0 {
			return j
		}
	}
	var ch struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(bytes.TrimSpace(data), &ch) != nil || len(ch.Choices) == 0 {
		return 0
	}
	return len(ch.Choices[0].Delta.Content)
}

func (w *tapWriter) Flush() {
	w.ResponseWriter.(http.Flusher).Flush()
	if w.pending {
		w.pending = false
		now := time.Now()
		w.tap.mu.Lock()
		w.tap.by[w.key] = append(w.tap.by[w.key], tapChunk{at: now, cum: w.cum})
		w.tap.mu.Unlock()
	}
}

func (w *tapWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// chunks returns the stamps of key's answer.
func (t *chunkTap) chunks(key string) []tapChunk {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.by[key]
}

// recv is one delta as the client got it: when, and the answer's text
// length with it.
type recv struct {
	at  time.Time
	cum int
}

// chatResult is one streamed chat as its client saw it.
type chatResult struct {
	key   string
	start time.Time
	sent  time.Time // through batcherd: when SubmitStreamed returned
	recvs []recv
	text  string
	err   error
}

// loadClient is the stream rig's load: chats straight to llmsim and
// through batcherd. It runs in the rig's process, or in one of its own
// (rigOpts.clientApart: clientChild).
type loadClient struct {
	url   string // llmsim's /v1
	hc    *http.Client
	conns []*target // SubmitStreamed clients, one connection each
}

// newLoadClient is a load client of llmsim at url (its /v1) with room for
// n concurrent chats, and no connection to batcherd yet.
//
// The direct client's transport is the backend's (upstream.NewTransport,
// as many idle connections as the backend keeps by default, the same
// connection buffers), so that both paths hold (and redial) alike and
// BenchmarkStream2000's difference is what lies between: with more idle
// connections its direct baseline found them already open and counted
// none of their buffers; with net/http's 4 KiB buffers against the
// backend's 1 KiB it counted 6 KB a stream that Batcher's side lacks.
func newLoadClient(url string, n int) loadClient {
	idle := min(n, openai.DefaultMaxIdleConns)
	return loadClient{url: url, hc: &http.Client{Transport: upstream.NewTransport(idle, nil)}}
}

// dial opens conns client connections to batcherd at addr (a connection
// carries at most security.DefaultMaxConcurrentStreams RPCs at once), as
// Batcher's Go client dials (client.DialOptions: its otelgrpc handler,
// on otel's global providers, no-op here, and its flow-control windows),
// and nothing more.
func (c *loadClient) dial(addr string, conns int) error {
	for range conns {
		cc, err := grpc.NewClient(addr, client.DialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return err
		}
		c.conns = append(c.conns, &target{client: batcherv1.NewBatcherServiceClient(cc), stop: func() { _ = cc.Close() }})
	}
	return nil
}

// close closes the client's connections.
func (c *loadClient) close() {
	for i := len(c.conns) - 1; i >= 0; i-- {
		c.conns[i].stop()
	}
	c.hc.CloseIdleConnections()
}

// streamRig is llmsim behind its tap, and batcherd's stack in front of it,
// and the load client.
type streamRig struct {
	tap *chunkTap
	loadClient
	// remote, when the load client runs in a process of its own
	// (rigOpts.clientApart), runs each round's chats there (run), and
	// loadClient's connections to batcherd are unused.
	remote *clientChild
	// stampsURL, when llmsim runs in a process of its own (rigOpts), is
	// where its tap's stamps are fetched from (pullStamps).
	stampsURL string
	core      *batcher.Batcher
	mu        sync.Mutex
	disp      map[string]time.Time // when the core handed each chat to the backend
	// hdl and dec are, for each chat through batcherd, when its gRPC
	// handler started and when its request was decoded (handlerStamps;
	// written only when newStreamRig was asked for them).
	hdl, dec map[string]time.Time
	// metrics gathers batcherd's MeterProvider: the core's, otelgrpc's
	// and the backend's upstream calls'.
	metrics prometheus.Gatherer
	stopFn  []func()
}

// forget drops the timestamps of every chat so far and makes room for the
// next n, so that the records of earlier chats, and the growth of their
// maps, do not land in a memory figure (BenchmarkStream2000 calls it
// before each side's before-snapshot: the dispatch stamps are written on
// the path through Batcher only, and a rehash would count against it).
func (r *streamRig) forget(n int) {
	r.tap.mu.Lock()
	r.tap.by = make(map[string][]tapChunk, n)
	r.tap.arr = make(map[string]time.Time, n)
	r.tap.mu.Unlock()
	r.mu.Lock()
	r.disp = make(map[string]time.Time, n)
	r.hdl, r.dec = make(map[string]time.Time, n), make(map[string]time.Time, n)
	r.mu.Unlock()
}

// rigOpts are a stream rig's variations.
type rigOpts struct {
	// stamp: batcherd's server also has handlerStamps, which notes when
	// each chat's handler started and its request was decoded
	// (streamRig.hops); without, its stack is batcherd's alone, as the
	// memory figure needs.
	stamp bool
	// simApart: llmsim and its tap run in a process of their own (this
	// test binary again: startSimChild), as an upstream does in
	// production. In this process llmsim reads a request only when the Go
	// runtime polls the network, which it does when a P has nothing else
	// to run (or every 10 ms): while a burst through batcherd keeps both
	// Ps busy, requests the backend has written wait unread, and arrive
	// at llmsim in clumps, a cost the direct side, whose clients keep the
	// Ps busy far less, barely pays. Its tap's stamps are fetched after
	// each round (pullStamps). Not for the memory figure, whose tap holds
	// answers in this process.
	simApart bool
	// clientApart: the load client, both its chats straight to llmsim and
	// those through batcherd, runs in a process of its own (this test
	// binary again: clientChild), as batcherd's callers do in production,
	// so that this process's CPU holds no client's: in this process the
	// client's 100 stream starts of a burst share batcherd's cores and
	// runtime. Its chats come back with their stamps after each round;
	// every stamp is the host's wall clock. Not for the memory figure nor
	// the steady load (run only).
	clientApart bool
}

// newStreamSim is llmsim as the stream benchmarks configure it.
func newStreamSim() (*llmsim.Server, error) {
	return llmsim.New(llmsim.Config{Latency: streamTTFT, PerToken: streamPerToken, ReplyTokens: streamReply})
}

// newStreamRig starts llmsim and batcherd with room for n concurrent
// streamed chats, and conns client connections to batcherd (a connection
// carries at most security.DefaultMaxConcurrentStreams RPCs at once).
func newStreamRig(tb testing.TB, n, conns int, o rigOpts) *streamRig {
	tb.Helper()
	tap := &chunkTap{by: make(map[string][]tapChunk), arr: make(map[string]time.Time)}
	rig := &streamRig{tap: tap, disp: make(map[string]time.Time),
		hdl: make(map[string]time.Time), dec: make(map[string]time.Time),
		loadClient: newLoadClient("", n)}
	if o.simApart {
		addr, stop := startSimChild(tb)
		rig.url, rig.stampsURL = addr+"/v1", addr+"/stamps"
		rig.stopFn = append(rig.stopFn, stop)
	} else {
		sim, err := newStreamSim()
		if err != nil {
			tb.Fatal(err)
		}
		tap.next = sim
		ts := httptest.NewServer(tap)
		rig.url = ts.URL + "/v1"
		rig.stopFn = append(rig.stopFn, func() { sim.Close(); ts.Close() })
	}
	var extra []grpc.ServerOption
	if o.stamp {
		extra = append(extra, grpc.StatsHandler(handlerStamps{rig}))
	}
	// The backend as batcherd builds it by default: no transport tuning
	// beyond what production gets, and batcherd's MeterProvider.
	bd := setupBatcherd.build(tb, extra...)
	rig.metrics = bd.metrics
	var (
		be  *openai.Backend
		err error
	)
	bd.asBatcherd(func() { be, err = openai.New(openai.Config{BaseURL: rig.url}) })
	if err != nil {
		tb.Fatal(err)
	}
	rig.stopFn = append(rig.stopFn, func() { _ = be.Close() })
	core, err := batcher.New(append(bd.core,
		batcher.WithBackend(batcher.BackendConfig{Name: "llmsim", Backend: stampedBackend{be, rig}, MaxConcurrency: n, ProtectedShare: -1}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "llmsim", Model: "sim-chat"}),
		batcher.WithQueueCapacity(2*n),
	)...)
	if err != nil {
		tb.Fatal(err)
	}
	rig.core = core
	srv, err := server.New(core, bd.server...)
	if err != nil {
		tb.Fatal(err)
	}
	srv.Register(bd.gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = bd.gs.Serve(lis)
	}()
	if o.clientApart {
		rig.remote = startClientChild(tb, clientChildConfig{SimURL: rig.url, Addr: lis.Addr().String(), N: n, Conns: conns})
	} else if err := rig.dial(lis.Addr().String(), conns); err != nil {
		tb.Fatal(err)
	}
	rig.stopFn = append([]func(){func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
		bd.cleanup()
		bd.gs.Stop()
		<-served
	}}, rig.stopFn...)
	return rig
}

func (r *streamRig) stop() {
	if r.remote != nil {
		r.remote.stop()
	}
	for i := len(r.conns) - 1; i >= 0; i-- {
		r.conns[i].stop()
	}
	for _, f := range r.stopFn {
		f()
	}
	r.hc.CloseIdleConnections()
}

// stampedBackend is the openai backend with the time the core dispatched
// each streamed chat noted (a map insert: the benchmark's only addition to
// the path).
type stampedBackend struct {
	*openai.Backend
	rig *streamRig
}

func (s stampedBackend) Stream(ctx context.Context, b *batcher.Batch, w batcher.DeltaWriter) (batcher.Response, error) {
	if len(b.Requests) == 1 {
		if m := b.Requests[0].Input.Messages; len(m) > 0 {
			now := time.Now()
			s.rig.mu.Lock()
			s.rig.disp[m[len(m)-1].Content] = now
			s.rig.mu.Unlock()
		}
	}
	return s.Backend.Stream(ctx, b, w)
}

// handlerStamps is a gRPC stats handler that notes, for each chat through
// batcherd, when its handler started (TagRPC, which grpc-go calls first on
// the handler's goroutine, here after otelgrpc's) and when its request was
// decoded (InPayload), keyed like the dispatch stamps (the chat's prompt).
type handlerStamps struct{ rig *streamRig }

type handlerStartKey struct{}

func (h handlerStamps) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, handlerStartKey{}, time.Now())
}

func (h handlerStamps) HandleRPC(ctx context.Context, s stats.RPCStats) {
	in, ok := s.(*stats.InPayload)
	if !ok {
		return
	}
	req, ok := in.Payload.(*batcherv1.SubmitStreamedRequest)
	if !ok {
		return
	}
	m := req.GetRequest().GetChat().GetMessages()
	start, ok := ctx.Value(handlerStartKey{}).(time.Time)
	if len(m) == 0 || !ok {
		return
	}
	key := m[len(m)-1].GetContent()
	h.rig.mu.Lock()
	h.rig.hdl[key], h.rig.dec[key] = start, in.RecvTime
	h.rig.mu.Unlock()
}

func (handlerStamps) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (handlerStamps) HandleConn(context.Context, stats.ConnStats)                       {}

// hops is where the time before a chat's request reached llmsim went: for
// each chat, how long after its start it reached each stamp.
type hops struct {
	sent       []time.Duration // the client's SubmitStreamed returned (through)
	handler    []time.Duration // batcherd's handler started (through, stamped rig)
	decoded    []time.Duration // and had decoded the request (through, stamped rig)
	dispatched []time.Duration // the core dispatched it (through)
	arrived    []time.Duration // its request reached llmsim
}

// hops returns the stamps of rs, chats through batcherd (through) or
// direct.
func (r *streamRig) hops(rs []chatResult, through bool) hops {
	r.tap.mu.Lock()
	defer r.tap.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	var h hops
	for _, c := range rs {
		if through {
			h.sent = append(h.sent, c.sent.Sub(c.start))
			h.dispatched = append(h.dispatched, r.disp[c.key].Sub(c.start))
			if t, ok := r.hdl[c.key]; ok {
				h.handler = append(h.handler, t.Sub(c.start))
				h.decoded = append(h.decoded, r.dec[c.key].Sub(c.start))
			}
		}
		h.arrived = append(h.arrived, r.tap.arr[c.key].Sub(c.start))
	}
	return h
}

// direct streams one chat straight from llmsim.
func (r *loadClient) direct(ctx context.Context, prompt string, onDelta func()) chatResult {
	res := chatResult{key: prompt}
	body, _ := json.Marshal(map[string]any{"model": "sim-chat", "stream": true, "max_tokens": streamMaxTokens,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	res.start = time.Now()
	resp, err := r.hc.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer func() { _ = resp.Body.Close() }()
	// The backend's reader size (backend/openai streamReadBuffer): the direct
	// caller holds what Batcher's upstream side holds (see newStreamRig).
	br := bufio.NewReaderSize(resp.Body, 1024)
	var text strings.Builder
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			res.err = fmt.Errorf("stream ended before [DONE]: %w", err)
			return res
		}
		data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			// Read to the end, as the openai backend does, so that the
			// connection goes back to the pool.
			_, _ = io.Copy(io.Discard, br)
			res.text = text.String()
			return res
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &ch); err != nil {
			res.err = err
			return res
		}
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			text.WriteString(ch.Choices[0].Delta.Content)
			res.recvs = append(res.recvs, recv{at: time.Now(), cum: text.Len()})
			if onDelta != nil && len(res.recvs) == 1 {
				onDelta()
			}
		}
	}
}

// through streams one chat through batcherd (SubmitStreamed) on conn.
func (r *loadClient) through(ctx context.Context, conn *target, prompt string, onDelta func()) chatResult {
	res := chatResult{key: prompt}
	res.start = time.Now()
	ss, err := conn.client.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: &batcherv1.Request{
		Model: "chat", Params: &batcherv1.GenerationParams{MaxTokens: proto.Int32(streamMaxTokens)},
		Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: []*batcherv1.ChatMessage{{Role: "user", Content: prompt}}}},
	}})
	res.sent = time.Now()
	if err != nil {
		res.err = err
		return res
	}
	cum := 0
	for {
		m, err := ss.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("no completion")
			}
			res.err = err
			return res
		}
		switch k := m.GetKind().(type) {
		case *batcherv1.SubmitStreamedResponse_Delta:
			if t := k.Delta.GetText(); t != "" {
				cum += len(t)
				res.recvs = append(res.recvs, recv{at: time.Now(), cum: cum})
				if onDelta != nil && len(res.recvs) == 1 {
					onDelta()
				}
			}
		case *batcherv1.SubmitStreamedResponse_Completion:
			res.text = k.Completion.GetText()
			if k.Completion.GetError() != nil {
				res.err = fmt.Errorf("completion error %v", k.Completion.GetError())
			}
			_, _ = ss.Recv() // the end of the RPC
			return res
		}
	}
}

// run streams n chats at once, directly or through batcherd, prompts
// tagged with tag: in this process, or in the load client's own
// (rigOpts.clientApart), which calls onDelta n times once every chat has
// its first delta (or has ended), rather than once at each.
func (r *streamRig) run(ctx context.Context, n int, tag string, through bool, onDelta func()) []chatResult {
	if r.remote != nil {
		return r.remote.run(n, tag, through, onDelta)
	}
	return r.loadClient.run(ctx, n, tag, through, onDelta)
}

// run streams n chats at once, directly or through batcherd, prompts
// tagged with tag. onDelta, when not nil, is called once a chat: at its
// first delta, or at its end when it had none (a failed chat, which
// measure reports), so that a caller waiting for n calls never hangs.
func (r *loadClient) run(ctx context.Context, n int, tag string, through bool, onDelta func()) []chatResult {
	out := make([]chatResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			prompt := fmt.Sprintf("stream %s chat %d please", tag, i)
			if through {
				out[i] = r.through(ctx, r.conns[i%len(r.conns)], prompt, onDelta)
			} else {
				out[i] = r.direct(ctx, prompt, onDelta)
			}
			if onDelta != nil && len(out[i].recvs) == 0 {
				onDelta()
			}
		})
	}
	wg.Wait()
	return out
}

// measure turns results into time to first token and per-delta delivery
// samples (for each chunk llmsim flushed, the client's receipt of the
// delta that brought its text, minus the flush), checking every answer
// whole.
func (r *streamRig) measure(tb testing.TB, rs []chatResult) (ttft, delivery []time.Duration) {
	tb.Helper()
	r.pullStamps(tb)
	for _, c := range rs {
		if c.err != nil {
			tb.Fatalf("chat %q: %v", c.key, c.err)
		}
		want, _ := llmsim.Reply(c.key, streamMaxTokens, streamReply)
		if c.text != want {
			tb.Fatalf("chat %q: answer %q, want %q", c.key, c.text, want)
		}
		ttft = append(ttft, c.recvs[0].at.Sub(c.start))
		// Each chunk's text is delivered by the first delta that holds
		// it: a delta that joins several chunks (a sender behind its
		// upstream) counts once for each, from that chunk's flush.
		j := 0
		for _, ck := range r.tap.chunks(c.key) {
			for j < len(c.recvs) && c.recvs[j].cum < ck.cum {
				j++
			}
			if j == len(c.recvs) {
				tb.Fatalf("chat %q: a chunk of llmsim's never reached the client", c.key)
			}
			delivery = append(delivery, c.recvs[j].at.Sub(ck.at))
		}
	}
	return ttft, delivery
}

// processCPU returns the process's CPU time so far, user and system.
func processCPU(tb testing.TB) time.Duration {
	d, err := rusageCPU()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// cpu returns the CPU time so far of this process and of the load
// client's own, when it has one (rigOpts.clientApart), and of this
// process alone.
func (r *streamRig) cpu(tb testing.TB) (all, own time.Duration) {
	own = processCPU(tb)
	if r.remote != nil {
		return own + r.remote.cpuTime(), own
	}
	return own, own
}

func rusageCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// steadyWaves is how many chats each client of a steady load runs back to
// back. The middle wave is measured: each of its chats lives its whole life
// with n chats open around it, the waves before and after keeping the load
// up while it starts and ends.
const steadyWaves = 3

// runSteady streams chats with n open at all times, directly or through
// batcherd: a closed loop of n clients, each starting its next chat as its
// last one ends, steadyWaves chats each. The clients' first chats start
// spread evenly over the first token interval (client i at
// i*streamPerToken/n), so that the chats' deltas reach Batcher at n
// instants of each token interval, not all at one as in run. It returns
// the n chats of the middle wave (as many as run returns) and every chat.
func (r *streamRig) runSteady(ctx context.Context, n int, tag string, through bool) (measured, all []chatResult) {
	all = make([]chatResult, steadyWaves*n)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Until(t0.Add(streamPerToken * time.Duration(i) / time.Duration(n))))
			for w := range steadyWaves {
				prompt := fmt.Sprintf("stream %s wave %d chat %d please", tag, w, i)
				if through {
					all[w*n+i] = r.through(ctx, r.conns[i%len(r.conns)], prompt, nil)
				} else {
					all[w*n+i] = r.direct(ctx, prompt, nil)
				}
			}
		})
	}
	wg.Wait()
	mid := steadyWaves / 2
	return all[mid*n : (mid+1)*n], all
}
