// Package storetest is the conformance suite every jobs.Store must pass, in
// the manner of River's riverdrivertest: one set of tests, run against each
// implementation.
//
// Files: storetest.go (Run and the helpers the cases share), jobcases.go
// (jobs created, listed, counted, moved and deleted), claims.go (claims,
// leases, group commits, restarts, abandoned jobs), results.go (pending
// tasks ended, results in done order, judges), tenants.go (tenants and
// their quotas), postgres.go (a PostgreSQL schema for a test).
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
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
		{"Tenants", testTenants},
		{"ListKind", testListKind},
		{"TenantQuotaConcurrentSafe", testTenantQuotaConcurrentSafe},
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
		Spec: jobs.Spec{Name: "t", Model: "m"}}, 0); err != nil {
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
