package main

import (
	"fmt"
	"testing"
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/llmsim"
)

// TestBatchAPIKill9 kills the built batcherd (SIGKILL) while a job goes
// through llmsim's batch API, at three points, three runs each: during an
// upload (its body cut after 4 KiB, 1 MiB or 3 MiB), right after a create
// (the batch exists upstream, batcherd never heard its id) and during a
// poll (the first, second or third create or poll). The batch API is
// frozen from the held call to the kill (batchSim), so the kill finds no
// other call of it half done. Restarted over the same data directory,
// batcherd finishes the job: no input file uploaded twice, no upstream
// batch created twice, every custom id on exactly one line.
func TestBatchAPIKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBatcherd(t)
	type run struct {
		call      string
		nth, head int64
		n, per    int
		pad       int // bytes of each item's message
	}
	var runs []run
	// One upstream batch of 250 items of 200 KiB (under a route's default
	// max_input_bytes, 256 KiB, which CreateJob checks each item against):
	// a 50 MB file, more than what was read plus what loopback can buffer,
	// so the kill cuts the upload short. Linux grows a connection's
	// receive buffer with what its reader took, up to tcp_rmem's largest
	// (32 MiB on these machines), and the sender's up to tcp_wmem's (4
	// MiB): a 10 MB file held 3 MiB in was once whole.
	for _, head := range []int64{4 << 10, 1 << 20, 3 << 20} {
		runs = append(runs, run{callUpload, 1, head, 250, 250, 200 << 10})
	}
	for _, call := range []string{callCreate, callPoll} {
		for nth := int64(1); nth <= 3; nth++ {
			runs = append(runs, run{call, nth, 0, 300, 100, 0})
		}
	}
	for _, r := range runs {
		name := fmt.Sprintf("%s/%d", r.call, r.nth)
		if r.call == callUpload {
			name = fmt.Sprintf("%s/%dKiB", r.call, r.head>>10)
		}
		t.Run(name, func(t *testing.T) {
			killRun(t, bin, r.call, r.nth, r.head, r.n, r.per, r.pad)
		})
	}
}

func killRun(t *testing.T, bin, call string, nth, head int64, n, per, pad int) {
	sim := newBatchSim(t, llmsim.Config{ReplyTokens: 8, BatchTime: 300 * time.Millisecond, Seed: 31})
	// A create the freeze caught never reaches llmsim (it answers 503 once
	// batcherd is dead), yet the restart cannot know that: it waits out
	// the create's bound before it makes the chunk's batch. 20 s, not the
	// default 10 minutes, keeps that wait inside the test's timeout; not
	// 5 s, which a create on a loaded machine can outlast (its retry then
	// makes a second batch, rightly counted as a twin).
	cfg := batchConfig(t, sim.URL, per, 20*time.Millisecond, 100*time.Millisecond, 20*time.Second)
	dataDir := t.TempDir()
	args := []string{"--config", cfg, "--data-dir", dataDir}
	d := startDaemon(t, bin, args...)
	g := sim.hold(call, nth, head)
	id := createBatchJob(t, d.client(t), n, pad)
	select {
	case <-g.arrived:
	case <-time.After(testTimeout):
		t.Fatalf("batcherd made no %d. %s call\n%s", nth, call, d.logs)
	}
	sim.settle()
	d.kill()
	sim.unfreeze(g)
	if call == callUpload && !g.cut.Load() {
		t.Fatal("the held upload was whole when batcherd died: make its file larger")
	}
	uploads, _ := sim.calls(callUpload)
	creates, _ := sim.calls(callCreate)
	polls, _ := sim.calls(callPoll)

	d2 := startDaemon(t, bin, args...)
	last := watchUntil(t, d2.client(t), id, terminal)
	if last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED || last.GetCounts().GetSucceeded() != int64(n) {
		t.Fatalf("after the restart the job ended %v\n%s", last, d2.logs)
	}
	exactlyOnceAcross(t, dataDir, id, n)
	files, batches := noneTwice(t, sim.sim)
	want := (n + per - 1) / per
	if files != want || batches != want {
		t.Errorf("%d input files and %d batches upstream, want %d each", files, batches, want)
	}
	t.Logf("killed at the %d. %s, %d KiB in (upstream then: %d uploads, %d creates, %d polls begun); restarted: %d files, %d batches upstream, %d items each once",
		nth, call, head>>10, uploads, creates, polls, files, batches, n)
}
