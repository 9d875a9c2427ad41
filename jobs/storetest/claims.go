package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
)

func testClaimInChunks(t *testing.T, s jobs.Store) {
	id := newJob(t, s, 10)
	a := claim(t, s, id, "a", 4)
	b := claim(t, s, id, "b", 4)
	c := claim(t, s, id, "c", 4)
	if !slices.Equal(seqs(a), []int64{0, 1, 2, 3}) || !slices.Equal(seqs(b), []int64{4, 5, 6, 7}) || !slices.Equal(seqs(c), []int64{8, 9}) {
		t.Fatalf("claims %v %v %v, want lowest seq first in chunks", seqs(a), seqs(b), seqs(c))
	}
	if a[1].CustomID != "c1" || string(a[1].Request) != `{"i":1}` || a[1].Line != 2 || a[1].Attempts != 1 || a[1].State != jobs.ItemRunning {
		t.Fatalf("claimed task %+v", a[1])
	}
	if d := claim(t, s, id, "d", 4); len(d) != 0 {
		t.Fatalf("claimed %v from an exhausted job", seqs(d))
	}
	wantCounts(t, s, id, jobs.Counts{Total: 10, Running: 10})
}

func testClaimsNeverOverlap(t *testing.T, s jobs.Store) {
	const n = 2000
	id := newJob(t, s, n)
	var mu sync.Mutex
	got := map[int64]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		owner := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for {
				ts, err := s.Claim(context.Background(), id, owner, 50, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if len(ts) == 0 {
					return
				}
				mu.Lock()
				for _, tk := range ts {
					if prev, dup := got[tk.Seq]; dup {
						errs <- fmt.Errorf("task %d claimed by %s and %s", tk.Seq, prev, owner)
					}
					got[tk.Seq] = owner
				}
				mu.Unlock()
				if _, err := s.Complete(context.Background(), id, owner, succeed(ts)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d tasks claimed, want %d", len(got), n)
	}
	j := get(t, s, id)
	if want := (jobs.Counts{Total: n, Succeeded: n}); j.Counts != want || j.TokensIn != 3*n || j.TokensOut != 5*n {
		t.Fatalf("counts %+v tokens %d/%d, want %+v", j.Counts, j.TokensIn, j.TokensOut, want)
	}
	// Done numbers every task once, in commit order.
	var all []jobs.Task
	for after := int64(0); ; {
		page, err := s.Done(t.Context(), id, after, 333)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].DoneSeq
	}
	if len(all) != n {
		t.Fatalf("Done listed %d tasks, want %d", len(all), n)
	}
	for i := 1; i < len(all); i++ {
		if all[i].DoneSeq <= all[i-1].DoneSeq {
			t.Fatalf("done numbers not increasing: %d after %d", all[i].DoneSeq, all[i-1].DoneSeq)
		}
	}
}

func testGroupCommit(t *testing.T, s jobs.Store) {
	id := newJob(t, s, 6)
	ts := claim(t, s, id, "a", 6)
	outs := succeed(ts)
	outs[2].State, outs[2].Result = jobs.ItemFailed, []byte(`{"error":"boom"}`)
	if n := complete(t, s, id, "a", outs[:4]); n != 4 {
		t.Fatalf("Complete recorded %d, want 4", n)
	}
	wantCounts(t, s, id, jobs.Counts{Total: 6, Running: 2, Succeeded: 3, Failed: 1})
	done, err := s.Done(t.Context(), id, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 4 || done[0].DoneSeq != 1 || done[3].DoneSeq != 4 || done[2].State != jobs.ItemFailed || string(done[2].Result) != `{"error":"boom"}` {
		t.Fatalf("done %+v", done)
	}
	if done[0].Model != "m" || done[0].TokensIn != 3 || done[0].TokensOut != 5 {
		t.Fatalf("done task %+v lost its model or tokens", done[0])
	}
	// Completing the same tasks again records nothing.
	if n := complete(t, s, id, "a", outs[:4]); n != 0 {
		t.Fatalf("a second Complete recorded %d, want 0", n)
	}
	complete(t, s, id, "a", outs[4:])
	wantCounts(t, s, id, jobs.Counts{Total: 6, Succeeded: 5, Failed: 1})
	if j := get(t, s, id); j.TokensIn != 18 || j.TokensOut != 30 {
		t.Fatalf("tokens %d/%d, want the six outcomes' 18/30", j.TokensIn, j.TokensOut)
	}
}

func testLostLeaseIsDropped(t *testing.T, s jobs.Store) {
	id := newJob(t, s, 3)
	ts := claim(t, s, id, "a", 3)
	if n := complete(t, s, id, "b", succeed(ts)); n != 0 {
		t.Fatalf("another owner's Complete recorded %d, want 0", n)
	}
	wantCounts(t, s, id, jobs.Counts{Total: 3, Running: 3})
}

func testLeaseExpiry(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	id := newJob(t, s, 4)
	if _, err := s.Claim(ctx, id, "dead", 2, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, id, "alive", 2, time.Hour); err != nil {
		t.Fatal(err)
	}
	// The dead owner's lease ends; the live one renews.
	if err := s.Extend(ctx, "alive", time.Hour); err != nil {
		t.Fatal(err)
	}
	n, err := s.Release(ctx, "", time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("Release freed %d tasks, want at least the dead owner's 2", n)
	}
	wantCounts(t, s, id, jobs.Counts{Total: 4, Pending: 2, Running: 2})
	again := claim(t, s, id, "heir", 10)
	if !slices.Equal(seqs(again), []int64{0, 1}) || again[0].Attempts != 2 {
		t.Fatalf("the heir claimed %v (attempts %d), want the dead owner's 0 and 1 on their second attempt", seqs(again), again[0].Attempts)
	}
	// The dead owner comes back too late: its results are dropped.
	if n := complete(t, s, id, "dead", succeed(again)); n != 0 {
		t.Fatalf("the dead owner's Complete recorded %d, want 0", n)
	}
}

func testResumeAfterRestart(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	id := newJob(t, s, 10)
	ts := claim(t, s, id, "before", 6)
	complete(t, s, id, "before", succeed(ts[:3]))
	// The process dies; on restart its claims go back.
	n, err := s.Release(ctx, "before", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("Release freed %d, want the 3 unfinished claims", n)
	}
	wantCounts(t, s, id, jobs.Counts{Total: 10, Pending: 7, Succeeded: 3})
	rest := claim(t, s, id, "after", 100)
	if !slices.Equal(seqs(rest), []int64{3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("after restart claimed %v, want 3..9 and never the finished 0..2", seqs(rest))
	}
}

func testAbandoned(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	held, left := newJob(t, s, 1), newJob(t, s, 1)
	if err := s.Hold(ctx, held, "creator", time.Minute); err != nil {
		t.Fatal(err)
	}
	abandoned := func(before time.Time) []string {
		t.Helper()
		ids, err := s.Abandoned(ctx, before, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	later := time.Now().Add(time.Hour)
	if ids := abandoned(later); !slices.Contains(ids, left) || slices.Contains(ids, held) {
		t.Fatalf("Abandoned = %v, want %s (no holder) and not %s (held)", ids, left, held)
	}
	if ids := abandoned(time.Now().Add(-time.Hour)); slices.Contains(ids, left) {
		t.Fatalf("Abandoned listed %s, created after the bound", left)
	}
	// The creator dies: its lease runs out and is released.
	if _, err := s.Release(ctx, "", later); err != nil {
		t.Fatal(err)
	}
	if ids := abandoned(later); !slices.Contains(ids, held) {
		t.Fatalf("Abandoned = %v, want %s once its holder's lease ended", ids, held)
	}
	// A queued job is never abandoned.
	if err := s.Transition(ctx, left, []jobs.State{jobs.StateValidating}, jobs.StateQueued, ""); err != nil {
		t.Fatal(err)
	}
	if ids := abandoned(later); slices.Contains(ids, left) {
		t.Fatalf("Abandoned listed the queued job %s", left)
	}
}
