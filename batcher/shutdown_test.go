package batcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestSubmitRacesShutdown submits from many goroutines, each waiting for
// every fourth result, while Shutdown starts: every Submit is either refused with ErrClosed or its call gets a
// result before Shutdown returns, and nothing stays pending. It is the
// promise that submit's fence against Shutdown keeps (no lock is shared
// between them).
func TestSubmitRacesShutdown(t *testing.T) {
	for round := range 20 {
		b, err := New(
			WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}, MaxConcurrency: 2}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 8, Window: time.Millisecond}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			accepted []*Call
			refused  int
			started  = make(chan struct{})
		)
		for g := range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					if g == 0 && i == 20 {
						close(started)
					}
					c, err := b.Submit(context.Background(), req(fmt.Sprintf("%d-%d", g, i), PriorityNormal))
					if errors.Is(err, ErrClosed) {
						mu.Lock()
						refused++
						mu.Unlock()
						return
					}
					if err != nil {
						t.Errorf("Submit: %v", err)
						return
					}
					mu.Lock()
					accepted = append(accepted, c)
					mu.Unlock()
					if i%4 == 3 {
						<-c.Done() // keeps the queue from filling
					}
				}
			})
		}
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := b.Shutdown(ctx); err != nil {
			t.Fatalf("round %d: Shutdown: %v", round, err)
		}
		cancel()
		wg.Wait()
		for _, c := range accepted {
			if !isDone(c) {
				t.Fatalf("round %d: %s accepted but has no result after Shutdown", round, c.Request().ID)
			}
			if err := c.Result().Err; err != nil {
				t.Fatalf("round %d: %s: %v, want a completion (the drain had time)", round, c.Request().ID, err)
			}
		}
		if refused != 8 || b.Pending() != 0 {
			t.Fatalf("round %d: %d submitters refused, want 8; %d pending", round, refused, b.Pending())
		}
	}
}

// TestSubmitFenceAgainstShutdown holds a Submit between its first look at
// closing and its count while Shutdown runs to the end: the Submit must
// then be refused with ErrClosed, not admitted into a batcher whose
// workers have stopped.
func TestSubmitFenceAgainstShutdown(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 2, BatchConfig{MaxBatchSize: 4, Window: time.Millisecond})
	resume, errc := holdSubmit(b, &b.testHookAdmit)
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit that raced Shutdown = %v, want ErrClosed", err)
	}
	if n := b.Pending(); n != 0 {
		t.Fatalf("%d pending after the refused Submit", n)
	}
}

// TestCountedSubmitAfterAbort holds a Submit that is counted and past the
// fence while Shutdown's drain is cut short and Shutdown returns. The
// Submit must then be refused with ErrShutdown rather than start a lane
// after Shutdown has stopped waiting for lane owners.
func TestCountedSubmitAfterAbort(t *testing.T) {
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}, MaxConcurrency: 1}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 4}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	resume, errc := holdSubmit(b, &b.testHookCounted)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown with a counted request and no time left returned nil, want the drain's error")
	}
	select {
	case <-b.stopped:
	default:
		t.Fatal("Shutdown returned before its goroutines stopped")
	}
	close(resume)
	if err := <-errc; !errors.Is(err, ErrShutdown) {
		t.Fatalf("Submit counted before the abort = %v, want ErrShutdown", err)
	}
	if n := b.Pending(); n != 0 {
		t.Fatalf("%d pending", n)
	}
	b.lanesMu.RLock()
	n := len(b.lanes)
	b.lanesMu.RUnlock()
	if n != 0 {
		t.Fatalf("%d lanes after Shutdown, want 0", n)
	}
}
