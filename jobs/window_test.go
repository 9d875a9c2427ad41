package jobs_test

import (
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
)

// A completion window longer than the core's bound on one request's
// timeout (24h) bounds the job, not each call: the items run, rather than
// each failing as a request.timeout out of range.
func TestCompletionWindowPastTheRequestBound(t *testing.T) {
	e := newEnv(t, nil)
	j := e.create(t, jobs.Spec{Model: "chat", CompletionWindow: 72 * time.Hour}, 5)
	p, _ := e.wait(t, j.ID)
	if p.State != jobs.StateCompleted || p.Counts.Succeeded != 5 {
		t.Fatalf("progress %+v, want 5 succeeded", p)
	}
}
