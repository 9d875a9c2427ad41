package server

import (
	"testing"
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/telemetry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// newAdmin serves an AdminService over e's core and server on its own
// in-memory listener, and returns its client and the channel that closes
// it.
func newAdmin(t *testing.T, e *env, interval time.Duration) (batcherv1.AdminServiceClient, *telemetry.Sampler, chan struct{}) {
	t.Helper()
	s := telemetry.NewSampler(telemetry.Sources{Lanes: e.core.Lanes, Backends: e.core.Stats, Limits: e.core.BackendLimits,
		Streams: e.srv.StreamStats}, interval, 0)
	closing := make(chan struct{})
	gs := grpc.NewServer()
	NewAdmin(s, closing).Register(gs)
	conn, stop := serveBuf(t, gs)
	t.Cleanup(func() {
		_ = conn.Close()
		s.Stop()
		stop()
	})
	return batcherv1.NewAdminServiceClient(conn), s, closing
}

func TestWatchStatsRejectsBadIntervals(t *testing.T) {
	e := newEnv(t, newFake())
	c, _, _ := newAdmin(t, e, 50*time.Millisecond)
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Hour, -time.Second} {
		ws, err := c.WatchStats(testCtx(t), &batcherv1.WatchStatsRequest{Interval: durationpb.New(d)})
		if err == nil {
			_, err = ws.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("interval %v: %v, want INVALID_ARGUMENT", d, err)
		}
	}
}

// TestWatchStatsSendsSnapshots holds requests upstream and in a lane, and
// watches them show in the snapshots; an open stream shows too; closing
// ends the watch with UNAVAILABLE.
func TestWatchStatsSendsSnapshots(t *testing.T) {
	e := newEnv(t, heldFake(), withConcurrency(1))
	c, sampler, closing := newAdmin(t, e, 20*time.Millisecond)
	sampler.Start()
	ctx := testCtx(t)
	st := e.openStream(t, ctx)
	st.send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}))
	st.send(reqMsg(chatReq("held", "a")))
	e.be.waitStarted(t, 1)
	urgent := chatReq("queued", "b")
	urgent.Priority = batcherv1.Priority_PRIORITY_URGENT
	st.send(reqMsg(urgent))

	ws, err := c.WatchStats(ctx, &batcherv1.WatchStatsRequest{Interval: durationpb.New(20 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	var snap *batcherv1.StatsSnapshot
	for {
		m, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		snap = m.GetSnapshot()
		var queued, flying int32
		for _, l := range snap.GetLanes() {
			queued += l.GetQueuedUrgent()
			flying += l.GetInFlight()
		}
		if queued == 1 && flying == 1 && snap.GetStreams().GetOpen() == 1 {
			break
		}
	}
	be := snap.GetBackends()[0]
	if be.GetName() != "fake" || be.GetInFlight() != 1 || be.GetConcurrencyLimit() != 1 || be.GetBreaker() != "closed" {
		t.Errorf("backend %v", be)
	}
	if snap.GetTime() == nil || snap.GetRequests() == nil || len(snap.GetJobs()) != 0 {
		t.Errorf("snapshot %v", snap)
	}
	close(closing)
	for {
		if _, err = ws.Recv(); err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("after closing: %v, want UNAVAILABLE", err)
	}
	e.be.Release()
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.drain(); err != nil {
		t.Fatal(err)
	}
	if got := e.srv.StreamStats(); got.Open != 0 {
		t.Errorf("streams %+v after the stream ended", got)
	}
}

func TestToSnapshotTranslatesJobs(t *testing.T) {
	s := &telemetry.Snapshot{Jobs: []telemetry.Job{{ID: "j", State: "running", Total: 10, Succeeded: 4, Failed: 2, ETA: 3 * time.Second,
		Cost: 0.5, Saving: 0.25}, {ID: "k"}}}
	out := ToSnapshot(s)
	if j := out.GetJobs()[0]; j.GetId() != "j" || j.GetDone() != 4 || j.GetEta().AsDuration() != 3*time.Second {
		t.Errorf("job %v", j)
	}
	// done stays the succeeded count (admin.proto); succeeded says so, and
	// the cost and saving are carried.
	if j := out.GetJobs()[0]; j.GetSucceeded() != 4 || j.GetFailed() != 2 || j.GetCostUsd() != 0.5 || j.GetSavingUsd() != 0.25 {
		t.Errorf("job %v: want succeeded 4, failed 2, cost_usd 0.5, saving_usd 0.25", j)
	}
	if out.GetJobs()[1].GetEta() != nil {
		t.Error("an unknown ETA was sent as zero")
	}
}

// The streamed figures the core keeps per backend cross the wire, and a
// job's cancelled and expired items apart from its failed ones.
func TestToSnapshotTranslatesStreamingAndEndedItems(t *testing.T) {
	s := &telemetry.Snapshot{
		Backends: []telemetry.Backend{{Name: "be", Calls: 5, Streaming: 2, Streamed: 7}},
		Jobs:     []telemetry.Job{{ID: "j", State: "cancelled", Total: 10, Succeeded: 4, Failed: 6, Cancelled: 3, Expired: 1}},
	}
	out := ToSnapshot(s)
	if be := out.GetBackends()[0]; be.GetStreaming() != 2 || be.GetStreamed() != 7 || be.GetCalls() != 5 {
		t.Errorf("backend %v: want streaming 2, streamed 7, calls 5", be)
	}
	if j := out.GetJobs()[0]; j.GetFailed() != 6 || j.GetCancelled() != 3 || j.GetExpired() != 1 {
		t.Errorf("job %v: want failed 6 (all that did not succeed), cancelled 3, expired 1", j)
	}
}

func TestToSnapshotTranslatesBatchAPITraffic(t *testing.T) {
	s := &telemetry.Snapshot{Backends: []telemetry.Backend{{Name: "be", Calls: 5, Items: 5, BatchAPIBatches: 3, BatchAPIRequests: 300}}}
	be := ToSnapshot(s).GetBackends()[0]
	if be.GetCalls() != 5 || be.GetRequests() != 5 || be.GetBatchApiBatches() != 3 || be.GetBatchApiRequests() != 300 {
		t.Errorf("backend %v: want 5 online calls of 5 requests, 3 batch-API batches of 300", be)
	}
}
