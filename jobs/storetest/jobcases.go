package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/batcherhq/batcher/jobs"
)

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
		page, err := s.ListJobs(ctx, "", jobs.ListQuery{After: after, Limit: 2})
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
	queued, err := s.ListJobs(ctx, "", jobs.ListQuery{State: jobs.StateQueued, Limit: 1000})
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
