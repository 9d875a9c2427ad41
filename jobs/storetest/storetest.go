// Package storetest is the conformance suite every jobs.Store must pass, in
// the manner of River's riverdrivertest: one set of tests, run against each
// implementation.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
)

// Run runs the suite. open returns the store under test; the suite closes
// nothing it did not open, and tolerates other jobs in the store (each test
// makes jobs of its own).
func Run(t *testing.T, open func(t *testing.T) jobs.Store) {
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, s jobs.Store)
	}{
		{"CreateGetList", testCreateGetList},
		{"AddTasksCounts", testAddTasksCounts},
		{"ClaimInChunks", testClaimInChunks},
		{"ClaimsNeverOverlap", testClaimsNeverOverlap},
		{"GroupCommit", testGroupCommit},
		{"LostLeaseIsDropped", testLostLeaseIsDropped},
		{"LeaseExpiry", testLeaseExpiry},
		{"ResumeAfterRestart", testResumeAfterRestart},
		{"EndPending", testEndPending},
		{"ResultsInOrder", testResultsInOrder},
		{"JudgeWaitsForRuns", testJudgeWaitsForRuns},
		{"Transition", testTransition},
		{"Delete", testDelete},
		{"Abandoned", testAbandoned},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, open(t)) })
	}
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "job_" + hex.EncodeToString(b[:])
}

// newJob creates a job with n plain tasks (no groups) and returns its id.
func newJob(t *testing.T, s jobs.Store, n int) string {
	t.Helper()
	ctx := t.Context()
	id := newID()
	if err := s.CreateJob(ctx, &jobs.Job{ID: id, State: jobs.StateValidating, CreatedAt: time.Now(),
		Spec: jobs.Spec{Name: "t", Model: "m"}}); err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	tasks := make([]jobs.Task, n)
	for i := range tasks {
		tasks[i] = jobs.Task{Seq: int64(i), Item: int64(i), Group: jobs.GroupNone, CustomID: fmt.Sprintf("c%d", i),
			Line: int64(i + 1), Request: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	for len(tasks) > 0 { // in chunks, as CreateJob streams them
		chunk := tasks[:min(len(tasks), 700)]
		tasks = tasks[len(chunk):]
		if err := s.AddTasks(ctx, id, chunk); err != nil {
			t.Fatalf("AddTasks: %v", err)
		}
	}
	return id
}

func get(t *testing.T, s jobs.Store, id string) *jobs.Job {
	t.Helper()
	j, err := s.GetJob(t.Context(), id)
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	return j
}

func wantCounts(t *testing.T, s jobs.Store, id string, want jobs.Counts) {
	t.Helper()
	if got := get(t, s, id).Counts; got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}

func claim(t *testing.T, s jobs.Store, id, owner string, n int) []jobs.Task {
	t.Helper()
	ts, err := s.Claim(t.Context(), id, owner, n, time.Minute)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return ts
}

func succeed(ts []jobs.Task) []jobs.Outcome {
	outs := make([]jobs.Outcome, len(ts))
	for i, t := range ts {
		outs[i] = jobs.Outcome{Seq: t.Seq, Group: t.Group, State: jobs.ItemSucceeded, Model: "m",
			Result: []byte(fmt.Sprintf(`{"seq":%d}`, t.Seq)), TokensIn: 3, TokensOut: 5, JudgeSeq: -1}
	}
	return outs
}

func complete(t *testing.T, s jobs.Store, id, owner string, outs []jobs.Outcome) int {
	t.Helper()
	n, err := s.Complete(t.Context(), id, owner, outs)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return n
}

func seqs(ts []jobs.Task) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.Seq
	}
	return out
}

func testCreateGetList(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	var ids []string
	for range 5 {
		ids = append(ids, newJob(t, s, 1))
	}
	if err := s.Transition(ctx, ids[1], []jobs.State{jobs.StateValidating}, jobs.StateQueued, ""); err != nil {
		t.Fatal(err)
	}
	j := get(t, s, ids[0])
	if j.Spec.Name != "t" || j.Spec.Model != "m" || j.State != jobs.StateValidating || j.CreatedAt.IsZero() {
		t.Fatalf("job %+v", j)
	}
	if _, err := s.GetJob(ctx, "job_nope"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("GetJob(unknown) = %v, want ErrNotFound", err)
	}
	// Page through everything two at a time: newest first, each of ours once.
	seen := map[string]int{}
	after := ""
	var order []string
	for {
		page, err := s.ListJobs(ctx, jobs.StateUnspecified, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			seen[j.ID]++
			if slices.Contains(ids, j.ID) {
				order = append(order, j.ID)
			}
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("job %s listed %d times, want once", id, seen[id])
		}
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	if !slices.Equal(order, want) {
		t.Fatalf("listed %v, want newest first %v", order, want)
	}
	queued, err := s.ListJobs(ctx, jobs.StateQueued, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range queued {
		if j.State != jobs.StateQueued {
			t.Fatalf("state filter let %s through", j.State)
		}
		if slices.Contains(ids, j.ID) && j.ID != ids[1] {
			t.Fatalf("job %s listed as queued", j.ID)
		}
	}
}

func testAddTasksCounts(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	id := newJob(t, s, 1500)
	// An invalid input arrives already failed, as an error line.
	if err := s.AddTasks(ctx, id, []jobs.Task{{Seq: 1500, Item: 1500, Group: jobs.GroupNone, State: jobs.ItemFailed,
		Result: []byte(`{"error":"line 1501"}`)}}); err != nil {
		t.Fatal(err)
	}
	j := get(t, s, id)
	if want := (jobs.Counts{Total: 1501, Pending: 1500, Failed: 1}); j.Counts != want || j.Invalid != 1 {
		t.Fatalf("counts %+v invalid %d, want %+v and 1", j.Counts, j.Invalid, want)
	}
	if g := j.Groups[jobs.GroupNone]; g.Total != 1501 || g.Pending != 1500 {
		t.Fatalf("group counts %+v", g)
	}
	// The invalid input's line is in the output from the start.
	done, err := s.Done(ctx, id, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].Seq != 1500 || done[0].DoneSeq != 1 || done[0].State != jobs.ItemFailed {
		t.Fatalf("done %+v, want the invalid input numbered first", done)
	}
}

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

func testEndPending(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	id := newJob(t, s, 10)
	running := claim(t, s, id, "a", 2)
	total := 0
	for {
		n, err := s.EndPending(ctx, id, jobs.ItemCancelled, []byte(`{"error":"cancelled"}`), 3)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != 8 {
		t.Fatalf("EndPending ended %d, want the 8 pending", total)
	}
	wantCounts(t, s, id, jobs.Counts{Total: 10, Running: 2, Cancelled: 8})
	// In-flight tasks may still finish.
	complete(t, s, id, "a", succeed(running))
	wantCounts(t, s, id, jobs.Counts{Total: 10, Succeeded: 2, Cancelled: 8})
	res, err := s.Results(ctx, id, -1, jobs.ItemCancelled, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 8 || res[0].Seq != 2 || string(res[0].Result) != `{"error":"cancelled"}` || res[0].DoneSeq == 0 {
		t.Fatalf("cancelled results %+v", res)
	}
	id2 := newJob(t, s, 3)
	if n, err := s.EndPending(ctx, id2, jobs.ItemExpired, []byte(`{"error":"expired"}`), 100); err != nil || n != 3 {
		t.Fatalf("EndPending(expired) = %d, %v", n, err)
	}
	wantCounts(t, s, id2, jobs.Counts{Total: 3, Expired: 3})
}

func testResultsInOrder(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	id := newJob(t, s, 20)
	ts := claim(t, s, id, "a", 20)
	outs := succeed(ts)
	for i := range outs {
		if i%3 == 0 {
			outs[i].State = jobs.ItemFailed
		}
	}
	slices.Reverse(outs) // completed out of order
	complete(t, s, id, "a", outs[:10])
	complete(t, s, id, "a", outs[10:])
	var got []int64
	for after := int64(-1); ; {
		page, err := s.Results(ctx, id, after, jobs.ItemPending, 6) // pending: any outcome
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, seqs(page)...)
		after = page[len(page)-1].Seq
	}
	if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}; !slices.Equal(got, want) {
		t.Fatalf("results %v, want item order", got)
	}
	failed, err := s.Results(ctx, id, 3, jobs.ItemFailed, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{6, 9, 12, 15, 18}; !slices.Equal(seqs(failed), want) {
		t.Fatalf("failed after cursor 3: %v, want %v", seqs(failed), want)
	}
}

func testJudgeWaitsForRuns(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	id := newID()
	if err := s.CreateJob(ctx, &jobs.Job{ID: id, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// Two inputs, each with runs 0 and 1 of group 0 and a judge.
	var tasks []jobs.Task
	for item := range int64(2) {
		for run := range 2 {
			tasks = append(tasks, jobs.Task{Seq: item*3 + int64(run), Item: item, Group: 0, Run: run})
		}
		tasks = append(tasks, jobs.Task{Seq: item*3 + 2, Item: item, Group: jobs.GroupJudge, State: jobs.ItemWaiting})
	}
	if err := s.AddTasks(ctx, id, tasks); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, id, jobs.Counts{Total: 6, Pending: 6})
	runs := claim(t, s, id, "a", 10)
	if !slices.Equal(seqs(runs), []int64{0, 1, 3, 4}) {
		t.Fatalf("claimed %v, want the runs only while judges wait", seqs(runs))
	}
	outs := succeed(runs)
	for i := range outs {
		outs[i].JudgeSeq = runs[i].Item*3 + 2
		outs[i].RunsFrom = runs[i].Item * 3
	}
	complete(t, s, id, "a", outs[:3]) // item 0's runs and one of item 1's
	judges := claim(t, s, id, "a", 10)
	if !slices.Equal(seqs(judges), []int64{2}) {
		t.Fatalf("claimed %v, want only item 0's judge", seqs(judges))
	}
	in, err := s.Tasks(ctx, id, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 2 || string(in[0].Result) != `{"seq":0}` || string(in[1].Result) != `{"seq":1}` {
		t.Fatalf("the judge's inputs %+v", in)
	}
	complete(t, s, id, "a", outs[3:])
	if judges := claim(t, s, id, "a", 10); !slices.Equal(seqs(judges), []int64{5}) {
		t.Fatalf("claimed %v, want item 1's judge", seqs(judges))
	}
	if g := get(t, s, id).Groups[jobs.GroupJudge]; g.Total != 2 || g.Running != 2 {
		t.Fatalf("judge group counts %+v", g)
	}
}

func testTransition(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	id := newJob(t, s, 1)
	if err := s.Transition(ctx, id, []jobs.State{jobs.StateValidating}, jobs.StateRunning, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Transition(ctx, id, []jobs.State{jobs.StateValidating}, jobs.StateQueued, ""); !errors.Is(err, jobs.ErrConflict) {
		t.Fatalf("Transition from a state it is not in = %v, want ErrConflict", err)
	}
	if err := s.Transition(ctx, "job_nope", []jobs.State{jobs.StateRunning}, jobs.StateQueued, ""); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("Transition(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.Transition(ctx, id, []jobs.State{jobs.StateRunning}, jobs.StateFailed, "disk full"); err != nil {
		t.Fatal(err)
	}
	j := get(t, s, id)
	if j.State != jobs.StateFailed || j.Error != "disk full" || j.StartedAt.IsZero() || j.EndedAt.IsZero() {
		t.Fatalf("job %+v", j)
	}
}

func testDelete(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	id := newJob(t, s, 5)
	claim(t, s, id, "a", 2)
	if err := s.DeleteJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetJob(ctx, id); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("GetJob after delete = %v", err)
	}
	if ts, err := s.Tasks(ctx, id, 0, 100); err != nil || len(ts) != 0 {
		t.Fatalf("tasks after delete: %d, %v", len(ts), err)
	}
	if err := s.DeleteJob(ctx, id); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("second delete = %v, want ErrNotFound", err)
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
