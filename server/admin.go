package server

import (
	"context"
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/telemetry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MaxWatchInterval bounds WatchStats' interval.
const MaxWatchInterval = time.Hour

// StreamStats returns the open SubmitStreams and the messages they hold for
// sending, for the live views.
func (s *Server) StreamStats() telemetry.Streams {
	s.mu.Lock()
	live := make([]*stream, 0, len(s.live))
	for st := range s.live {
		live = append(live, st)
	}
	s.mu.Unlock()
	out := telemetry.Streams{Open: len(live)}
	for _, st := range live {
		st.mu.Lock()
		out.Buffered += len(st.out)
		st.mu.Unlock()
		out.Buffered += int(st.nEnded.Load()) // Completions not yet taken
	}
	return out
}

// trackStream adds st to the streams StreamStats reports, until the
// returned func runs.
func (s *Server) trackStream(st *stream) func() {
	s.mu.Lock()
	if s.live == nil {
		s.live = make(map[*stream]struct{})
	}
	s.live[st] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.live, st)
		s.mu.Unlock()
	}
}

// Admin is the AdminService: it translates the sampler's snapshots into
// messages.
type Admin struct {
	batcherv1.UnimplementedAdminServiceServer
	sampler *telemetry.Sampler
	closing <-chan struct{}
}

// NewAdmin returns the AdminService over sampler. Its streams end with
// UNAVAILABLE once closing is closed (nil: never) or the sampler stops.
func NewAdmin(sampler *telemetry.Sampler, closing <-chan struct{}) *Admin {
	return &Admin{sampler: sampler, closing: closing}
}

// Register registers the AdminService on gs.
func (a *Admin) Register(gs *grpc.Server) { batcherv1.RegisterAdminServiceServer(gs, a) }

// WatchStats sends the latest snapshot at once, then the newest one every
// interval.
func (a *Admin) WatchStats(in *batcherv1.WatchStatsRequest, ss grpc.ServerStreamingServer[batcherv1.WatchStatsResponse]) error {
	interval := a.sampler.Interval()
	if d := in.GetInterval(); d != nil {
		if err := d.CheckValid(); err != nil {
			return status.Errorf(codes.InvalidArgument, "interval: %v", err)
		}
		interval = d.AsDuration()
		if interval < a.sampler.Interval() || interval > MaxWatchInterval {
			return status.Errorf(codes.InvalidArgument, "interval: must be %v to %v, got %v", a.sampler.Interval(), MaxWatchInterval, interval)
		}
	}
	// One context for the whole watch, ended by the caller or by closing.
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	if a.closing != nil {
		go func() {
			select {
			case <-a.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	snap, seq := a.sampler.Latest()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if seq == 0 { // nothing sampled yet: wait for the first
			var err error
			if snap, seq, err = a.sampler.Next(ctx, 0); err != nil {
				return a.ended(ss.Context())
			}
		}
		if err := ss.Send(&batcherv1.WatchStatsResponse{Snapshot: ToSnapshot(&snap)}); err != nil {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return a.ended(ss.Context())
		}
		var err error
		if snap, seq, err = a.sampler.Next(ctx, seq); err != nil {
			return a.ended(ss.Context())
		}
	}
}

// ended is the status of a watch that ended: the caller's context error,
// or UNAVAILABLE when the server or the sampler stopped.
func (a *Admin) ended(caller context.Context) error {
	if err := caller.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, "server shutting down")
}

// ToSnapshot translates a snapshot into its message.
func ToSnapshot(s *telemetry.Snapshot) *batcherv1.StatsSnapshot {
	out := &batcherv1.StatsSnapshot{
		Time:    timestamppb.New(s.Time),
		Streams: &batcherv1.StreamStats{Open: int32(s.Streams.Open), Buffered: int32(s.Streams.Buffered)},
		Requests: &batcherv1.RequestStats{
			Admitted: s.Requests.Admitted, Rejected: s.Requests.Rejected,
			Completed: s.Requests.Completed, Failed: s.Requests.Failed,
			CompletedPerSecond: s.Requests.PerSec, TokensPerSecond: s.Requests.TokensPerSec,
			LatencyP50: durationpb.New(s.Requests.P50), LatencyP95: durationpb.New(s.Requests.P95),
			LatencyP99: durationpb.New(s.Requests.P99),
		},
	}
	for _, l := range s.Lanes {
		out.Lanes = append(out.Lanes, &batcherv1.LaneStats{
			Name: l.Name, Route: l.Route, Backend: l.Backend,
			QueuedUrgent: int32(l.Queued["urgent"]), QueuedHigh: int32(l.Queued["high"]),
			QueuedNormal: int32(l.Queued["normal"]), QueuedLow: int32(l.Queued["low"]),
			QueuedDeferrable: int32(l.Queued["deferrable"]), InFlight: int32(l.InFlight),
		})
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, &batcherv1.BackendStats{
			Name: b.Name, Breaker: b.Breaker, InFlight: int32(b.InFlight),
			ConcurrencyLimit: int32(b.Limit), MaxConcurrency: int32(b.MaxConcurrency),
			RpmLimit: b.RPMLimit, TpmLimit: b.TPMLimit, RpmMax: int64(b.RPMMax), TpmMax: int64(b.TPMMax),
			RpmUsed: b.RPMUsed, TpmUsed: b.TPMUsed, Calls: b.Calls, Requests: b.Items,
			RateLimited: b.RateLimited, Retries: b.Retries, Fallbacks: b.Fallbacks, DedupHits: b.DedupHits,
			BatchApiBatches: b.BatchAPIBatches, BatchApiRequests: b.BatchAPIRequests,
			Streaming: int32(b.Streaming), Streamed: b.Streamed,
		})
	}
	for _, j := range s.Jobs {
		js := &batcherv1.JobStats{Id: j.ID, Name: j.Name, State: j.State, Total: j.Total,
			Done: j.Succeeded, Succeeded: j.Succeeded, // done: succeeded, as it always was (admin.proto)
			Failed: j.Failed, Cancelled: j.Cancelled, Expired: j.Expired,
			Tokens: j.Tokens, ItemsPerSecond: j.ItemsPerSec, TokensPerSecond: j.TokensPerSec,
			CostUsd: j.Cost, SavingUsd: j.Saving}
		if j.ETA > 0 {
			js.Eta = durationpb.New(j.ETA)
		}
		out.Jobs = append(out.Jobs, js)
	}
	if f := s.Fleet; f != nil {
		fs := &batcherv1.FleetStats{Self: f.Self, RedisReachable: f.Redis}
		for _, r := range f.Replicas {
			fs.Replicas = append(fs.Replicas, &batcherv1.FleetReplica{Id: r.ID, Self: r.Self, Info: r.Info})
		}
		for _, b := range f.Budgets {
			fb := &batcherv1.FleetBudget{Backend: b.Backend, RateFactor: b.Factor,
				RpmLeft: b.RPMLeft, TpmLeft: b.TPMLeft, RpmUsed: b.RPMUsed, TpmUsed: b.TPMUsed,
				Leases: make(map[string]int32, len(b.Leases))}
			if !b.PausedUntil.IsZero() {
				fb.PausedUntil = timestamppb.New(b.PausedUntil)
			}
			if !b.OpenUntil.IsZero() {
				fb.OpenUntil = timestamppb.New(b.OpenUntil)
			}
			for id, n := range b.Leases {
				fb.Leases[id] = int32(n)
			}
			fs.Budgets = append(fs.Budgets, fb)
		}
		out.Fleet = fs
	}
	return out
}
