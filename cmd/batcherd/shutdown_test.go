package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// writeConfig writes a YAML config into the test's directory.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "batcherd.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func dialRaw(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// backlogConfig serves one request at a time, 25 ms each: about 40 a
// second, against a drain of 500 ms.
const backlogConfig = `
queue_capacity: 5000
stream_window: 2000
drain_timeout: 500ms
backends:
  - name: slow
    type: sim
    max_concurrency: 1
    sim: {base_latency: 25ms, per_token: 0s}
routes:
  - name: chat
    operation: chat
    backend: slow
    batching: {max_batch_size: 1, window: 1ms}
`

// TestShutdownBacklogLargerThanDrain: when the drain runs out of time, every
// accepted request still gets its Completion (UNAVAILABLE for the aborted
// ones) and the stream its final summary, before the connection closes.
func TestShutdownBacklogLargerThanDrain(t *testing.T) {
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--config", writeConfig(t, backlogConfig))
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	c, err := client.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	const n = 1000
	var mu sync.Mutex
	queued := 0
	allQueued := make(chan struct{})
	s, err := c.Stream(ctx, client.OnEvent(func(ev *batcherv1.Event) {
		if ev.GetQueued() != nil {
			mu.Lock()
			if queued++; queued == n {
				close(allQueued)
			}
			mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	hs := make([]*client.Handle, n)
	for i := range hs {
		if hs[i], err = s.Send(ctx, client.Chat("chat", client.User("x"), client.WithID(fmt.Sprint(i)), client.WithMaxTokens(1))); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	select {
	case <-allQueued:
	case <-ctx.Done():
		t.Fatalf("not all requests were accepted:\n%s", logs)
	}
	stop() // the signal

	var ok, aborted int
	for _, h := range hs {
		comp, err := h.Wait(ctx)
		switch {
		case comp == nil:
			t.Fatalf("accepted request %s got no Completion: %v", h.ID(), err)
		case err == nil:
			ok++
		case status.Code(err) == codes.Unavailable:
			aborted++
		default:
			t.Fatalf("request %s: %v, want OK or UNAVAILABLE", h.ID(), err)
		}
	}
	if err := s.Close(ctx); err != nil && status.Code(err) != codes.Unavailable {
		t.Errorf("stream ended with %v", err)
	}
	if sum := s.Summary(); !sum.GetFinal() || sum.GetCompleted()+sum.GetFailed() != n {
		t.Errorf("final summary %v, want final with %d terminal", sum, n)
	}
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d", code)
	}
	t.Logf("%d completed, %d aborted with UNAVAILABLE", ok, aborted)
	if aborted == 0 {
		t.Errorf("no request was aborted: the backlog did not outlast the drain")
	}
	for _, msg := range []string{"drain incomplete: the requests still pending were ended with UNAVAILABLE", "results delivered"} {
		if !logs.has(msg) {
			t.Errorf("no %q logged:\n%s", msg, logs)
		}
	}
}

// TestShutdownIdleWatch: an open health Watch gets NOT_SERVING and ends at
// once, and a shutdown with no work in flight does not wait out
// drain_timeout (30 s). It takes milliseconds; the bound is a third of the
// drain rather than a second, which a 2-core CI machine running another
// package's race-enabled tests beside this one may stall past with nothing
// wrong, while a watch that held the drain would still take 30 s.
func TestShutdownIdleWatch(t *testing.T) {
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--drain-timeout=30s")
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	w, err := healthpb.NewHealthClient(dialRaw(t, addr)).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch message %v, %v", m, err)
	}
	start := time.Now()
	stop()
	select {
	case code := <-exit:
		if code != exitOK {
			t.Errorf("exit %d", code)
		}
	case <-ctx.Done():
		t.Fatalf("no exit:\n%s", logs)
	}
	if took := time.Since(start); took >= 10*time.Second {
		t.Errorf("shutdown with an idle watch took %v, want well under the 30s drain_timeout", took)
	}
	var last healthpb.HealthCheckResponse_ServingStatus
	for {
		m, err := w.Recv()
		if err != nil {
			break
		}
		last = m.GetStatus()
	}
	if last != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("the watch's last status was %v, want NOT_SERVING", last)
	}
}

const goawayConfig = `
drain_timeout: 30s
backends:
  - name: slow
    type: sim
    sim: {base_latency: 3s, per_token: 0s}
routes:
  - name: chat
    operation: chat
    backend: slow
    batching: {max_batch_size: 1, window: 1ms}
`

// TestShutdownSendsGoAway: once the drain starts, clients are told to go
// away (the connection leaves READY while a request is still being served)
// and new connections are refused, rather than accepted and answered
// UNAVAILABLE; the request in flight still completes.
func TestShutdownSendsGoAway(t *testing.T) {
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--config", writeConfig(t, goawayConfig))
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cc := dialRaw(t, addr)
	s, h := sendQueued(ctx, t, cc)
	// The stream is open, so the connection is READY, or is reported so
	// once the channel's state catches up (under load it was seen still
	// CONNECTING here): wait for it, for the GOAWAY below to show as its
	// leaving READY.
	for st := cc.GetState(); st != connectivity.Ready; st = cc.GetState() {
		if !cc.WaitForStateChange(ctx, st) {
			t.Fatalf("connection %v, want READY", st)
		}
	}
	stop()
	if !cc.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatalf("the connection stayed READY:\n%s", logs)
	}
	select {
	case <-h.Done():
		t.Fatalf("GOAWAY came only after the request in flight was done: not at the drain's start")
	default:
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		_ = conn.Close()
		t.Errorf("a new connection was accepted during the drain")
	}
	if comp, err := h.Wait(ctx); err != nil || comp.GetText() == "" {
		t.Errorf("the request in flight: %v, %v", comp, err)
	}
	_ = s.Close(ctx)
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d", code)
	}
}

// TestShutdownKeepsJobStoreForTelemetry: the job store stays open through
// the drain, for the telemetry that lists the jobs every stats interval
// (the status page, /metrics), and is closed only after the telemetry has
// stopped: no "database is closed" warning at each sample of the drain.
func TestShutdownKeepsJobStoreForTelemetry(t *testing.T) {
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--config", writeConfig(t, goawayConfig),
		"--data-dir", t.TempDir(), "--stats-interval", "100ms")
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	s, h := sendQueued(ctx, t, dialRaw(t, addr))
	stop() // the drain waits about 3s for the held request: many samples
	if comp, err := h.Wait(ctx); err != nil || comp.GetText() == "" {
		t.Errorf("the request in flight: %v, %v", comp, err)
	}
	_ = s.Close(ctx)
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d", code)
	}
	if logs.has("listing jobs for telemetry") {
		t.Errorf("the telemetry read a closed job store during the shutdown:\n%s", logs)
	}
}

// sendQueued opens a SubmitStream on cc, sends it the chat "held" and
// returns once the service has queued it.
func sendQueued(ctx context.Context, t *testing.T, cc *grpc.ClientConn) (*client.Stream, *client.Handle) {
	t.Helper()
	queued := make(chan struct{}, 1)
	s, err := client.New(cc).Stream(ctx, client.OnEvent(func(ev *batcherv1.Event) {
		if ev.GetQueued() != nil {
			queued <- struct{}{}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Send(ctx, client.Chat("chat", client.User("held"), client.WithID("held")))
	if err != nil {
		t.Fatal(err)
	}
	<-queued
	return s, h
}
