package security

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/server"
)

// The fairness scenario's shape. One slot upstream that takes
// fairService per batch of fairBatch: the heavy tenant's fairHeavy
// closed-loop callers keep a backlog of several batches. A batch leaves
// full or after the window, so that the light tenant's fairLight callers,
// alone, wait out the window; under the flood, fair queuing puts them in
// the next batch, which starts within one service time.
const (
	fairService = 250 * time.Millisecond
	fairWindow  = 250 * time.Millisecond
	fairBatch   = 4
	fairLight   = 2
	fairHeavy   = 10 * fairLight // ten times the light tenant's load
	fairRounds  = 15             // requests per light caller and phase
	burstLight  = 20
	burstHeavy  = 10 * burstLight
)

// fairEnv is the real server and core behind the security interceptors,
// with tenants "light" and "heavy" of equal weight. Route "chat" runs on
// the simulated provider with a fixed service time; route "burst" on a
// backend that records the id of every request in dispatch order and
// holds its first batch until gate is closed.
type fairEnv struct {
	client   batcherv1.BatcherServiceClient
	core     *batcher.Batcher
	light    string // tokens
	heavy    string
	gate     chan struct{}
	mu       sync.Mutex
	burstIDs []string // "h..." the heavy caller's, "l..." the light one's
}

func newFairEnv(t *testing.T, sameTenant bool) *fairEnv {
	t.Helper()
	e := &fairEnv{light: newToken(t), heavy: newToken(t), gate: make(chan struct{})}
	file := filepath.Join(t.TempDir(), "tenants.yaml")
	if sameTenant { // the control: both callers are one tenant, one fifo
		writeFile(t, file, fmt.Appendf(nil, "tenants:\n  - name: all\n    tokens: [%s, %s]\n", HashToken(e.light), HashToken(e.heavy)))
	} else {
		writeFile(t, file, fmt.Appendf(nil, "tenants:\n  - name: light\n    tokens: [%s]\n  - name: heavy\n    tokens: [%s]\n",
			HashToken(e.light), HashToken(e.heavy)))
	}
	sec, err := New(Config{TenantsFile: file, ReloadInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sec.Close)
	provider, err := sim.New(sim.Config{BaseLatency: fairService})
	if err != nil {
		t.Fatal(err)
	}
	first := true
	recorder := batcher.BackendFunc(func(ctx context.Context, bt *batcher.Batch, out []batcher.Response) error {
		e.mu.Lock()
		wait := first
		first = false
		for _, r := range bt.Requests {
			e.burstIDs = append(e.burstIDs, r.ID)
		}
		e.mu.Unlock()
		if wait {
			select {
			case <-e.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for i := range out {
			out[i].Text = "ok"
			out[i].FinishReason = batcher.FinishStop
		}
		return nil
	})
	batch := batcher.BatchConfig{MaxBatchSize: fairBatch, MinBatchSize: fairBatch, Window: fairWindow}
	e.core, err = batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: provider, MaxConcurrency: 1, ProtectedShare: -1}),
		batcher.WithBackend(batcher.BackendConfig{Name: "rec", Backend: recorder, MaxConcurrency: 1, ProtectedShare: -1}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim", Batch: batch}),
		batcher.WithRoute(batcher.Route{Name: "burst", Op: batcher.OpChat, Backend: "rec", Batch: batch}),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := sec.OnTenants(func(ts *Tenants) error { return e.core.SetTenants(ts.Policies()) }); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(e.core, server.WithLogger(quiet), server.WithAccessFunc(AccessFrom))
	if err != nil {
		t.Fatal(err)
	}
	gs := server.NewGRPCServer(nil, sec.GRPCServerOptions()...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		gs.Stop()
		<-done
	})
	e.client = dial(t, lis.Addr().String(), nil)
	t.Cleanup(e.open) // after a failure, before the shutdown above
	return e
}

// open lets the held first batch of route "burst" go. Idempotent.
func (e *fairEnv) open() {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.gate:
	default:
		close(e.gate)
	}
}

// lightLatencies runs the light tenant's callers, fairRounds requests each,
// and returns every request's latency, sorted.
func (e *fairEnv) lightLatencies(ctx context.Context) ([]time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	errs := make(chan error, fairLight)
	for i := range fairLight {
		go func() {
			for j := range fairRounds {
				start := time.Now()
				_, err := e.client.Submit(withToken(ctx, e.light), &batcherv1.SubmitRequest{Request: chatRequest(fmt.Sprintf("l%d-%d", i, j))})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
			}
			errs <- nil
		}()
	}
	var first error
	for range fairLight {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	slices.Sort(lat)
	return lat, first
}

// flood starts the heavy tenant's closed-loop callers on route "chat" and
// returns a function that stops them and reports how many completed.
func (e *fairEnv) flood(t *testing.T, ctx context.Context) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for i := range fairHeavy {
		wg.Go(func() {
			for j := 0; ctx.Err() == nil; j++ {
				_, err := e.client.Submit(withToken(ctx, e.heavy), &batcherv1.SubmitRequest{Request: chatRequest(fmt.Sprintf("h%d-%d", i, j))})
				if err == nil {
					mu.Lock()
					n++
					mu.Unlock()
				} else if ctx.Err() == nil {
					t.Errorf("heavy request: %v", err)
					return
				}
			}
		})
	}
	// Wait until the flood has a backlog: more queued than one batch.
	deadline := time.Now().Add(20 * time.Second)
	for e.core.Pending() < fairHeavy {
		if time.Now().After(deadline) {
			t.Fatalf("the flood built no backlog: %d pending after 20 s, want %d", e.core.Pending(), fairHeavy)
		}
		time.Sleep(10 * time.Millisecond) // polling: a count reached has no event
	}
	return func() int {
		cancel()
		wg.Wait()
		return n
	}
}

func p99(sorted []time.Duration) time.Duration {
	return sorted[int(math.Ceil(0.99*float64(len(sorted))))-1]
}

// fairnessLatency measures the light tenant's p99 alone and under the
// heavy tenant's flood, in the same run.
func fairnessLatency(t *testing.T, sameTenant bool) (solo, flooded time.Duration) {
	e := newFairEnv(t, sameTenant)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lat, err := e.lightLatencies(ctx)
	if err != nil {
		t.Fatalf("light alone: %v", err)
	}
	solo = p99(lat)
	stop := e.flood(t, ctx)
	lat, err = e.lightLatencies(ctx)
	heavyDone := stop()
	if err != nil {
		t.Fatalf("light under the flood: %v", err)
	}
	flooded = p99(lat)
	t.Logf("light p99 alone %v, under a 10x flood %v (%.2fx); %d heavy requests completed meanwhile",
		solo.Round(time.Millisecond), flooded.Round(time.Millisecond), float64(flooded)/float64(solo), heavyDone)
	return solo, flooded
}

// TestFairnessTwoTenantsOnePriority is the fairness test: two
// tenants of equal weight at one priority, the heavy one sending ten times
// the light one's load through the real server.
//   - Latency: the light tenant's p99 stays within 2x its p99 alone
//     (measured in the same test, on the same server).
//   - Throughput, by counts: with both tenants backlogged (the heavy one's
//     ten-fold burst queued first), the light tenant gets at least its
//     weighted share, half, of the requests dispatched while it has work.
func TestFairnessTwoTenantsOnePriority(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 20 s")
	}
	t.Run("latency", func(t *testing.T) {
		solo, flooded := fairnessLatency(t, false)
		if flooded > 2*solo {
			t.Fatalf("light p99 under the flood %v, more than 2x its p99 alone %v", flooded, solo)
		}
	})
	t.Run("share", func(t *testing.T) {
		light := burstShare(t, false)
		// Half of the first 2*burstLight requests after the held batch, less
		// one batch of slack for where the two flows' virtual times start.
		if light < burstLight-fairBatch {
			t.Fatalf("light tenant got %d of the first %d requests dispatched, want at least %d (its half, less a batch)",
				light, 2*burstLight, burstLight-fairBatch)
		}
	})
}

// burstShare queues the heavy tenant's burst of burstHeavy requests and
// then the light tenant's burstLight, all held behind the first batch, and
// returns how many of the first 2*burstLight requests dispatched after the
// first batch were the light tenant's.
func burstShare(t *testing.T, sameTenant bool) int {
	e := newFairEnv(t, sameTenant)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := func(token, prefix string, n int) <-chan error {
		done := make(chan error, 1)
		s, err := e.client.SubmitStream(withToken(ctx, token))
		if err != nil {
			done <- err
			return done
		}
		go func() {
			for i := range n {
				r := chatRequest(fmt.Sprintf("%s%d", prefix, i))
				r.Model = "burst"
				if err := s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: r}}); err != nil {
					break
				}
			}
			_ = s.CloseSend()
		}()
		go func() {
			ok := 0
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					err = nil
					if ok != n {
						err = fmt.Errorf("%s: %d completions, want %d", prefix, ok, n)
					}
					done <- err
					return
				}
				if err != nil {
					done <- err
					return
				}
				if c := m.GetCompletion(); c != nil && c.GetError() == nil {
					ok++
				}
			}
		}()
		return done
	}
	waitPending := func(n int) {
		deadline := time.Now().Add(30 * time.Second)
		for e.core.Pending() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d requests pending after 30 s, want %d", e.core.Pending(), n)
			}
			time.Sleep(5 * time.Millisecond) // polling: a count reached has no event
		}
	}
	heavy := send(e.heavy, "h", burstHeavy)
	waitPending(burstHeavy)
	light := send(e.light, "l", burstLight)
	waitPending(burstHeavy + burstLight)
	e.open()
	for _, ch := range []<-chan error{heavy, light} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	e.mu.Lock()
	order := slices.Clone(e.burstIDs[fairBatch:]) // the held first batch left out
	e.mu.Unlock()
	n := 0
	for _, id := range order[:2*burstLight] {
		if id[0] == 'l' {
			n++
		}
	}
	t.Logf("light tenant: %d of the first %d requests dispatched (its weighted share is %d)", n, 2*burstLight, burstLight)
	return n
}

// TestFairnessFigures prints the fairness figures for BENCHMARKS.md: the
// light tenant's p99 ratio with fair queuing and, as the control, with
// both callers as one tenant (one fifo). Set BATCHER_FAIRNESS_FIGURES=1.
func TestFairnessFigures(t *testing.T) {
	if os.Getenv("BATCHER_FAIRNESS_FIGURES") == "" {
		t.Skip("set BATCHER_FAIRNESS_FIGURES=1 to print the figures")
	}
	for _, same := range []bool{false, true} {
		name := "fair"
		if same {
			name = "one-tenant-fifo"
		}
		t.Run(name, func(t *testing.T) {
			solo, flooded := fairnessLatency(t, same)
			share := burstShare(t, same)
			fmt.Printf("fairness %s: light p99 alone %v, under 10x flood %v, ratio %.2f; burst share %d of the first %d (weighted share %d)\n", name,
				solo.Round(time.Millisecond), flooded.Round(time.Millisecond), float64(flooded)/float64(solo), share, 2*burstLight, burstLight)
		})
	}
}
