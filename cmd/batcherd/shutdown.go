package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/batcherhq/batcher/server"
)

// deliveryBudget is how long, after the drain, the streams get to send the
// results they owe (the aborted requests' UNAVAILABLE among them) and their
// final summaries before the remaining connections are closed. Only a
// caller that stopped reading needs it all.
const deliveryBudget = 5 * time.Second

// grpcServer is the part of *grpc.Server that shutdown uses.
type grpcServer interface {
	GracefulStop()
	Stop()
}

// shutdown stops the service:
//
//  1. at once, gs.GracefulStop in the background: the listener closes and
//     every connection gets a GOAWAY, so that clients and meshes send new
//     work elsewhere instead of being answered UNAVAILABLE; RPCs already
//     open go on;
//  2. the jobs stop claiming and let their items in flight finish, then
//     srv.Drain, both within drain: health NOT_SERVING and watches ended,
//     admission closed, the core's backlog finished or, at the deadline,
//     ended with UNAVAILABLE;
//  3. srv.Deliver within deliveryBudget, a budget of its own: every stream
//     sends its results and final summary and ends, and GracefulStop
//     returns as the last RPCs end; the HTTP front door (which answers 503
//     from the moment admission closes) finishes its answers and closes
//     within the same budget;
//  4. whatever is still open when that budget is spent is closed (gs.Stop).
//
// Each step logs what it took.
func shutdown(log *slog.Logger, srv *server.Server, gs grpcServer, drain time.Duration, stopJobs func(context.Context), front *httpFront) {
	start := time.Now()
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), drain)
	stopJobs(ctx)
	err := srv.Drain(ctx)
	cancel()
	if err != nil {
		log.Error("drain incomplete: the requests still pending were ended with UNAVAILABLE",
			"err", err, "drain_timeout", drain.String(), "took", since(start))
	} else {
		log.Info("drained", "took", since(start))
	}

	dstart := time.Now()
	streams := srv.OpenStreams()
	dctx, dcancel := context.WithTimeout(context.Background(), deliveryBudget)
	defer dcancel()
	if err := srv.Deliver(dctx); err != nil {
		log.Warn("delivery incomplete: streams still sending when the delivery budget ran out",
			"err", err, "streams", streams, "delivery_budget", deliveryBudget.String(), "took", since(dstart))
	} else {
		log.Info("results delivered", "streams", streams, "delivery_budget", deliveryBudget.String(), "took", since(dstart))
	}
	front.shutdown(dctx, log) // its callers' answers were decided by the drain
	select {
	case <-stopped:
	case <-dctx.Done():
		log.Warn("delivery budget spent: closing the remaining connections", "delivery_budget", deliveryBudget.String())
		gs.Stop()
		<-stopped
	}
	log.Info("stopped", "took", since(start))
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
