package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// unreadConfig: the embedded sim answers at once, and the queue is large
// enough that every request read is accepted: the worst case for memory.
const unreadConfig = `
listen: 127.0.0.1:0
queue_capacity: 100000
drain_timeout: 5s
backends:
  - name: sim
    type: sim
    max_concurrency: 64
    sim: {base_latency: 1ms, per_token: 0s}
routes:
  - {name: chat, operation: chat, backend: sim, batching: {max_batch_size: 32, window: 2ms}}
`

// unreadConns spreads the streams over this many connections.
const unreadConns = 10

// runUnread opens streams that each send perStream requests and never
// read, and reports batcherd's RSS above idle.
//
// With unlimited, the server-wide budget and stream cap are lifted to the
// old behaviour (only the per-stream window bounds what is read): the
// baseline the limits are compared with.
func runUnread(ctx context.Context, dir, bin string, streams, perStream int, unlimited bool) bool {
	yaml := unreadConfig
	if unlimited {
		yaml += "max_streams: 1000000\nmax_pending_messages: 1000000000\n"
	}
	cfg := writeFile(dir, "unread.yaml", yaml)
	bd, err := start("batcherd", bin, []string{"--config", cfg, "--log-format", "json",
		"--admin-listen", "127.0.0.1:0", "--pprof", "--http-listen", "127.0.0.1:0"}, nil)
	if err != nil {
		fail(err)
	}
	defer func() { _ = bd.stop(10 * time.Second) }()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	addr, err := bd.addr(actx, "listening")
	if err != nil {
		fail(err)
	}
	debug, err := bd.addr(actx, "admin listening")
	if err != nil {
		fail(err)
	}
	pid := bd.cmd.Process.Pid

	// A plain gRPC client, not dial's: the streams stand for any client
	// that stops reading, with gRPC's default windows, as the figures in
	// BENCHMARKS.md were measured; Batcher's client's fixed 1 MiB windows
	// would let the server hand more of what it holds to the clients.
	conns := make([]*grpc.ClientConn, unreadConns)
	for i := range conns {
		if conns[i], err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			fail(err)
		}
	}
	// Warm up: one request answered, then the idle size.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	if _, err := batcherv1.NewBatcherServiceClient(conns[0]).Submit(wctx, &batcherv1.SubmitRequest{Request: unreadReq("warm")}); err != nil {
		fail(fmt.Errorf("warm-up request: %w", err))
	}
	wcancel()
	time.Sleep(2 * time.Second) // let the warm-up's garbage settle before the idle reading
	idle := sample{rss: rssMiB(pid), goroutines: goroutines(debug)}

	w := watch(pid, debug, 250*time.Millisecond)
	sctx, scancel := context.WithCancel(ctx)
	us := openUnread(sctx, conns, streams, perStream)
	// No event says "the server has read all it will": sample until RSS
	// has not grown by a MiB for steady, within maxHold.
	const steady, maxHold = 8 * time.Second, 90 * time.Second
	hold := untilSteady(pid, steady, maxHold)
	peak := w.end()
	after := sample{rss: rssMiB(pid), goroutines: goroutines(debug)}
	if path := os.Getenv("SOAK_HEAP_PROFILE"); path != "" {
		saveProfile(debug, "heap", path)
	}
	if path := os.Getenv("SOAK_GOROUTINE_PROFILE"); path != "" {
		saveProfile(debug, "goroutine?debug=1", path)
	}
	scancel()
	us.wg.Wait()
	for _, c := range conns {
		_ = c.Close()
	}
	limits := "default limits"
	if unlimited {
		limits = "limits lifted (baseline)"
	}
	fmt.Printf("%s; unread streams: %d opened (%d requests each, never read), over %d connections\n", limits, us.opened, perStream, unreadConns)
	for e, n := range us.openErrs {
		fmt.Printf("  %d streams failed to open: %s\n", n, e)
	}
	fmt.Printf("idle:            %v\n", idle)
	fmt.Printf("peak:            %v (RSS steady for %v after %v)\n", peak, steady, hold)
	fmt.Printf("end of hold:     %v\n", after)
	delta := peak.rss - idle.rss
	fmt.Printf("RSS above idle at peak: %.1f MiB (target: at most 64 MiB)\n", delta)
	return delta <= 64
}

// unreadStreams are the streams openUnread opened: read opened and
// openErrs after wg.Wait.
type unreadStreams struct {
	wg       sync.WaitGroup
	mu       sync.Mutex
	opened   int
	openErrs map[string]int // by error message
}

// openUnread opens streams over conns, each sending perStream requests and
// never reading, until ctx ends.
func openUnread(ctx context.Context, conns []*grpc.ClientConn, streams, perStream int) *unreadStreams {
	us := &unreadStreams{openErrs: map[string]int{}}
	for i := range streams {
		us.wg.Add(1)
		go func() {
			defer us.wg.Done()
			s, err := batcherv1.NewBatcherServiceClient(conns[i%len(conns)]).SubmitStream(ctx)
			us.mu.Lock()
			if err != nil {
				us.openErrs[err.Error()]++
			} else {
				us.opened++
			}
			us.mu.Unlock()
			if err != nil {
				return
			}
			for j := range perStream {
				// Blocks once the server stops reading: flow control.
				if s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{
					Request: unreadReq(fmt.Sprintf("s%d-%d", i, j))}}) != nil {
					return
				}
			}
		}()
	}
	return us
}

// untilSteady samples pid's RSS until it has not grown by a MiB for
// steady, within maxHold, and returns how long that took.
func untilSteady(pid int, steady, maxHold time.Duration) time.Duration {
	began := time.Now()
	last, lastGrowth := 0.0, time.Now()
	for time.Since(began) < maxHold && time.Since(lastGrowth) < steady {
		time.Sleep(500 * time.Millisecond)
		if r := rssMiB(pid); r > last+1 {
			last, lastGrowth = r, time.Now()
		}
	}
	return time.Since(began).Round(time.Second)
}

func unreadReq(id string) *batcherv1.Request {
	return &batcherv1.Request{Id: id, Model: "chat", Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{
		Messages: []*batcherv1.ChatMessage{{Role: "user", Content: "a request from a caller who never reads: " + strings.Repeat("x", 64)}},
	}}}
}

// saveProfile writes one of batcherd's profiles to path: the heap
// (SOAK_HEAP_PROFILE, for go tool pprof) or the goroutines, as text
// (SOAK_GOROUTINE_PROFILE).
func saveProfile(debug, name, path string) {
	res, err := http.Get("http://" + debug + "/debug/pprof/" + name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return
	}
	defer func() { _ = res.Body.Close() }()
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return
	}
	_, _ = io.Copy(f, res.Body)
	_ = f.Close()
}
