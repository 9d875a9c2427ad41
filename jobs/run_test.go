package jobs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
)

// slowStore is a store whose Claim or Complete, once armed, blocks until
// its context ends, as a database that hangs would: entered is closed when
// the first such call blocks, and left receives each one's error when it
// returns.
type slowStore struct {
	jobs.Store
	claims, completes atomic.Bool // armed
	once              sync.Once
	entered           chan struct{}
	left              chan error
}

func newSlowStore(s jobs.Store) *slowStore {
	return &slowStore{Store: s, entered: make(chan struct{}), left: make(chan error, 100)}
}

func (s *slowStore) hang(ctx context.Context) error {
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	select {
	case s.left <- ctx.Err():
	default:
	}
	return ctx.Err()
}

func (s *slowStore) Claim(ctx context.Context, jobID, owner string, n int, lease time.Duration) ([]jobs.Task, error) {
	if s.claims.Load() {
		return nil, s.hang(ctx)
	}
	return s.Store.Claim(ctx, jobID, owner, n, lease)
}

func (s *slowStore) Complete(ctx context.Context, jobID, owner string, outs []jobs.Outcome) (int, error) {
	if s.completes.Load() {
		return 0, s.hang(ctx)
	}
	return s.Store.Complete(ctx, jobID, owner, outs)
}

// waitFor fails the test unless ch yields within d.
func waitFor[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
		panic("unreachable")
	}
}

// A manager whose drain runs out while a run waits on a store call that
// never returns gives up on it: Shutdown returns, the call's context ends,
// and the run's goroutine is gone (goleak, at the package's end).
func TestShutdownDuringSlowStoreCallReturns(t *testing.T) {
	var slow *slowStore
	e := newEnv(t, func(c *jobs.Config) {
		slow = newSlowStore(c.Store)
		c.Store = slow
	})
	slow.completes.Store(true)
	e.create(t, jobs.Spec{Model: "chat"}, 50)
	waitFor(t, slow.entered, time.Minute, "a commit reaching the store")

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := e.m.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the drain's deadline", err)
	}
	// The 5s bound is Shutdown's own wait for the runs after the drain.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
	if err := waitFor(t, slow.left, time.Second, "the hung commit's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the hung commit returned %v, want its context cancelled", err)
	}
}

// Deleting a job whose run waits on a store call that never returns does
// not wait for it.
func TestDeleteDuringSlowStoreCallReturns(t *testing.T) {
	var slow *slowStore
	e := newEnv(t, func(c *jobs.Config) {
		slow = newSlowStore(c.Store)
		c.Store = slow
	})
	slow.completes.Store(true)
	j := e.create(t, jobs.Spec{Model: "chat"}, 50)
	waitFor(t, slow.entered, time.Minute, "a commit reaching the store")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.m.Delete(ctx, j.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := e.m.Get(ctx, j.ID); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := waitFor(t, slow.left, time.Second, "the hung commit's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the hung commit returned %v, want its context cancelled", err)
	}
}

// Cancelling a job whose run waits on a claim that never returns ends the
// claim, and the job ends CANCELLED.
func TestCancelDuringSlowClaim(t *testing.T) {
	var slow *slowStore
	e := newEnv(t, func(c *jobs.Config) {
		slow = newSlowStore(c.Store)
		c.Store = slow
	})
	slow.claims.Store(true)
	j := e.create(t, jobs.Spec{Model: "chat"}, 20)
	waitFor(t, slow.entered, time.Minute, "a claim reaching the store")
	if _, err := e.m.Cancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, slow.left, 5*time.Second, "the hung claim's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the hung claim returned %v, want its context cancelled", err)
	}
	p, _ := e.wait(t, j.ID)
	if p.State != jobs.StateCancelled || p.Counts.Cancelled != 20 {
		t.Fatalf("progress %+v, want CANCELLED with 20 cancelled", p)
	}
}
