package jobs_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/jobs/storetest"
)

// queuedJob creates a QUEUED job of n chat tasks directly in the store.
func queuedJob(t testing.TB, s jobs.Store, n int) string {
	t.Helper()
	ctx := context.Background()
	j := &jobs.Job{ID: "job_" + strconv.FormatInt(time.Now().UnixNano(), 36), State: jobs.StateValidating,
		CreatedAt: time.Now(), Spec: jobs.Spec{Model: "chat"}}
	if err := s.CreateJob(ctx, j, 0); err != nil {
		t.Fatal(err)
	}
	req := []byte(`{"input":{"op":1,"messages":[{"role":"user","content":"hi"}]},"params":{}}`)
	tasks := make([]jobs.Task, n)
	for i := range tasks {
		tasks[i] = jobs.Task{Seq: int64(i), Item: int64(i), Group: jobs.GroupNone, CustomID: fmt.Sprintf("c%d", i),
			Line: int64(i + 1), Request: req}
	}
	if err := s.AddTasks(ctx, j.ID, tasks); err != nil {
		t.Fatal(err)
	}
	if err := s.Transition(ctx, j.ID, []jobs.State{jobs.StateValidating}, jobs.StateQueued, ""); err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// A PostgreSQL owner is alive while its connection holds its lock: its
// claims stay its own however long their lease; once its process dies
// (here: its store closes, which drops the connection as a crash would),
// another process takes them back at once, not when the lease ends.
func TestDeadOwnersClaimsReturnAtOnce(t *testing.T) {
	dsn := storetest.PostgresSchema(t)
	ctx := t.Context()
	open := func() jobs.Store {
		s, err := jobs.OpenPostgres(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	if err := a.(jobs.Liveness).Live(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	lb := b.(jobs.Liveness)
	if err := lb.Live(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := open().(jobs.Liveness).Live(ctx, "a"); err == nil {
		t.Fatal("a second process took the live owner name a")
	}
	id := queuedJob(t, a, 10)
	if got, err := a.Claim(ctx, id, "a", 10, time.Hour); err != nil || len(got) != 10 {
		t.Fatalf("claim by a: %d, %v", len(got), err)
	}
	if n, err := lb.ReleaseDead(ctx, "b"); err != nil || n != 0 {
		t.Fatalf("ReleaseDead while a lives = %d, %v; want 0", n, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// The server drops a's lock once its backend has seen the connection
	// close, a moment after Close returns: poll for that, as the managers
	// do at every poll.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := lb.ReleaseDead(ctx, "b")
		if err != nil || n > 10 {
			t.Fatalf("ReleaseDead after a died = %d, %v", n, err)
		}
		if n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a's claims did not come back within 10s of its connection closing")
		}
		<-tick.C
	}
	if got, err := b.Claim(ctx, id, "b", 10, time.Hour); err != nil || len(got) != 10 {
		t.Fatalf("claim by b after a died: %d, %v", len(got), err)
	}
}

// A manager started on a shared store runs at once the tasks a dead
// process left claimed under a long lease (kill -9 and a restart).
func TestRestartTakesOverADeadOwnersClaims(t *testing.T) {
	store := openPostgres(t)
	e := newEnv(t, nil) // for its core
	id := queuedJob(t, store, 20)
	if got, err := store.Claim(t.Context(), id, "previous-life", 20, time.Hour); err != nil || len(got) != 20 {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	m := started(t, jobs.Config{Store: store, Core: e.core, DataDir: t.TempDir(), Lease: time.Hour,
		CommitInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var last jobs.Progress
	err := m.Watch(ctx, id, 20*time.Millisecond, func(p jobs.Progress) error { last = p; return nil })
	if err != nil || last.Counts.Succeeded != 20 {
		t.Fatalf("Watch = %v, last %+v: the dead owner's claims did not come back (lease 1h)", err, last.Counts)
	}
}
