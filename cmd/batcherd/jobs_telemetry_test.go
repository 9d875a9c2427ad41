package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// A running job shows in WatchStats' snapshots with its counts, rate and
// ETA.
func TestRunningJobInStats(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 100
	bin := buildBatcherd(t)
	// One item at a time: about 5s, of which the rate window needs the
	// first second or so.
	up := newUpstream(t, 50*time.Millisecond)
	d := startDaemon(t, bin, "--config", jobsConfig(t, up.URL), "--data-dir", t.TempDir(), "--stats-interval", "100ms")
	id := createChatJob(t, d.client(t), n, 1)

	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	st, err := batcherv1.NewAdminServiceClient(conn).WatchStats(ctx, &batcherv1.WatchStatsRequest{Interval: durationpb.New(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("WatchStats ended before the job showed running with progress: %v", err)
		}
		for _, j := range r.GetSnapshot().GetJobs() {
			if j.GetId() != id {
				continue
			}
			if j.GetName() != "e2e" || j.GetTotal() != n || j.GetDone() > n || j.GetFailed() != 0 {
				t.Fatalf("job in stats %v, want name e2e, total %d, none failed", j, n)
			}
			if j.GetState() == "completed" {
				t.Fatalf("the job completed (%v) before a snapshot showed it running: make it slower", j)
			}
			// The rate and ETA are GetJob's, not left at zero.
			if j.GetState() == "running" && j.GetDone() > 0 && j.GetItemsPerSecond() > 0 && j.GetEta().AsDuration() > 0 {
				return
			}
		}
	}
}
