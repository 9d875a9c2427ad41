package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
)

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
	if err := s.CreateJob(ctx, &jobs.Job{ID: id, CreatedAt: time.Now()}, 0); err != nil {
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
