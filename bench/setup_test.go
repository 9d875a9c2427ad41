package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/security"
	"github.com/batcherhq/batcher/server"
	"github.com/batcherhq/batcher/telemetry"
)

// setup is how a service under load is served: which of batcherd's layers
// wrap it. Every layer is built by the code batcherd builds it with
// (cmd/batcherd/main.go), from that code's defaults.
type setup struct {
	// interceptors: server.NewGRPCServer with a no-op tracer provider
	// (otelgrpc, panic recovery, the decoding codec, the worker pool), as
	// batcherd runs without tracing; else a bare grpc.NewServer.
	interceptors bool
	// security: the default security.Config (plaintext, every caller the
	// anonymous tenant, the default limits): its server options and
	// interceptors (authentication, the edge checks), AdminOnly, and the
	// server's tenant function.
	security bool
	// metrics: telemetry.Setup's MeterProvider (the Prometheus reader
	// batcherd always has), for otelgrpc and the core.
	metrics bool
	// accessLog: server.AccessLog at info, as JSON through
	// telemetry.NewLogHandler into /dev/null.
	accessLog bool
}

var (
	// setupBare is a bare grpc.NewServer.
	setupBare = setup{}
	// setupGRPC is server.NewGRPCServer alone: what earlier runs (to
	// dc12995) called batcherd.
	setupGRPC = setup{interceptors: true}
	// setupBatcherd is batcherd as its defaults serve, without tracing:
	// security, metrics, and no access log (telemetry.access_log "off").
	setupBatcherd = setup{interceptors: true, security: true, metrics: true}
)

// name names st in benchmark names; compareSetups are the named ones.
func (st setup) name() string {
	switch st {
	case setupBare:
		return "bare"
	case setupGRPC:
		return "grpc"
	case setupBatcherd:
		return "batcherd"
	}
	return fmt.Sprintf("%+v", st)
}

// built is a setup, built.
type built struct {
	gs     *grpc.Server
	core   []batcher.Option // for the core behind gs
	server []server.Option  // for the server.Server on gs
	// metrics gathers what the setup's MeterProvider recorded; nil without
	// metrics.
	metrics prometheus.Gatherer
	// meter is the setup's MeterProvider; nil without metrics.
	meter   metric.MeterProvider
	cleanup func() // to run once gs has stopped
}

// asBatcherd runs f with the global MeterProvider that batcherd sets
// before it builds its backends (cmd/batcherd/telemetry.go), so that a
// backend built in f is built as batcherd's are.
func (bd built) asBatcherd(f func()) {
	if bd.meter == nil {
		f()
		return
	}
	otel.SetMeterProvider(bd.meter)
	defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
	f()
}

// build builds st's grpc.Server, with extra after st's own server options,
// and the options it adds to a core and a server.Server.
//
// otelgrpc takes its MeterProvider from the global one when its handler is
// built, so build sets the global provider for that moment and puts back
// the no-op one TestMain set, which every other server here is built with.
func (st setup) build(tb testing.TB, extra ...grpc.ServerOption) built {
	tb.Helper()
	if !st.interceptors {
		return built{gs: grpc.NewServer(extra...), cleanup: func() {}}
	}
	var (
		bd       built
		gsOpts   []grpc.ServerOption
		cleanups []func()
	)
	if st.security {
		sec, err := security.New(security.Config{ReloadInterval: -1})
		if err != nil {
			tb.Fatal(err)
		}
		cleanups = append(cleanups, sec.Close)
		unary, stream := security.AdminServiceOnly(batcherv1.AdminService_ServiceDesc.ServiceName)
		gsOpts = append(gsOpts, sec.GRPCServerOptions()...)
		gsOpts = append(gsOpts, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
		bd.server = append(bd.server, server.WithAccessFunc(security.AccessFrom))
	}
	if st.accessLog {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			tb.Fatal(err)
		}
		cleanups = append(cleanups, func() { _ = f.Close() })
		log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})))
		gsOpts = append(gsOpts, server.AccessLog(log, slog.LevelInfo)...)
	}
	if st.metrics {
		tel, err := telemetry.Setup(context.Background(), telemetry.Config{LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			tb.Fatal(err)
		}
		cleanups = append(cleanups, func() { _ = tel.Shutdown(context.Background()) })
		bd.core = append(bd.core, tel.CoreOptions()...)
		bd.metrics = tel.Gatherer
		bd.meter = tel.MeterProvider
		otel.SetMeterProvider(tel.MeterProvider)
		defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
	}
	bd.gs = server.NewGRPCServer(noop.NewTracerProvider(), append(gsOpts, extra...)...)
	bd.cleanup = func() {
		for _, f := range cleanups {
			f()
		}
	}
	return bd
}

// TestBatcherdSetupRecordsMetrics checks that setupBatcherd measures what
// batcherd's metrics cost: after one Submit, otelgrpc's call duration and
// the core's completed requests are in its MeterProvider's registry.
//
// grpc-go hands the server's stats handler the call's end after it has
// written the status, so the client may return from Submit before the
// duration is recorded: the registry is read until both series show,
// within a bound, rather than once.
func TestBatcherdSetupRecordsMetrics(t *testing.T) {
	bd := setupBatcherd.build(t)
	bt := serveBatcherOn(t, bd.gs, bd.cleanup, bd.core, bd.server...)
	defer bt.stop()
	if _, err := bt.client.Submit(t.Context(), &batcherv1.SubmitRequest{Request: newRequest("r-1")}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"rpc_server_call_duration_seconds": false, "batcher_requests_completed_total": false}
	all := func() bool {
		families, err := bd.metrics.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if _, ok := want[f.GetName()]; ok && len(f.GetMetric()) > 0 {
				want[f.GetName()] = true
			}
		}
		for _, found := range want {
			if !found {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !all() && time.Now().Before(deadline) {
		<-tick.C // polling: a series recorded has no event to wait on
	}
	for name, found := range want {
		if !found {
			t.Errorf("no %s after a Submit on setupBatcherd", name)
		}
	}
}

// TestStreamRigRecordsUpstreamMetrics checks that the stream benchmarks
// pay for what batcherd records of an upstream call: after one streamed
// chat through the stream rig, the core's gen_ai client duration is in
// batcherd's registry.
func TestStreamRigRecordsUpstreamMetrics(t *testing.T) {
	rig := newStreamRig(t, 1, 1, rigOpts{})
	defer rig.stop()
	rs := rig.run(t.Context(), 1, "metrics", true, nil)
	rig.measure(t, rs)
	families, err := rig.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "gen_ai_client_operation_duration_seconds" && len(f.GetMetric()) > 0 {
			return
		}
	}
	t.Error("no gen_ai_client_operation_duration_seconds after a streamed chat through the stream rig")
}

// TestStreamRigStampsHops checks that the stamped rig notes each hop of a
// chat through batcherd, in the order the chat passes them: its handler
// starts, decodes the request, the core dispatches it, llmsim gets it.
func TestStreamRigStampsHops(t *testing.T) {
	const n = 3
	rig := newStreamRig(t, n, 1, rigOpts{stamp: true})
	defer rig.stop()
	rs := rig.run(t.Context(), n, "hops", true, nil)
	rig.measure(t, rs)
	h := rig.hops(rs, true)
	if len(h.sent) != n || len(h.handler) != n || len(h.decoded) != n || len(h.dispatched) != n || len(h.arrived) != n {
		t.Fatalf("hops of %d chats: %d sent, %d handler, %d decoded, %d dispatched, %d arrived",
			n, len(h.sent), len(h.handler), len(h.decoded), len(h.dispatched), len(h.arrived))
	}
	for i, c := range rs {
		if h.sent[i] < 0 || h.handler[i] <= 0 || h.handler[i] > h.decoded[i] || h.decoded[i] > h.dispatched[i] || h.dispatched[i] > h.arrived[i] {
			t.Errorf("chat %q: sent %v, handler %v, decoded %v, dispatched %v, arrived %v after its start: want them in that order",
				c.key, h.sent[i], h.handler[i], h.decoded[i], h.dispatched[i], h.arrived[i])
		}
	}
}

// TestStreamRigSimApart checks the rig with llmsim in a process of its
// own: chats through batcherd and direct end whole, each has chunks
// stamped by llmsim's tap there, every such chunk reaches its client
// (measure), and the hops of the chats through batcherd, with llmsim's
// arrival stamps, are in order.
func TestStreamRigSimApart(t *testing.T) {
	const n = 3
	rig := newStreamRig(t, n, 1, rigOpts{stamp: true, simApart: true})
	defer rig.stop()
	for _, through := range []bool{false, true} {
		rs := rig.run(t.Context(), n, fmt.Sprint("apart-", through), through, nil)
		_, delivery := rig.measure(t, rs)
		// measure fails on a chunk stamped and not delivered; this fails
		// on stamps that never came back from llmsim's process.
		for _, c := range rs {
			if len(rig.tap.chunks(c.key)) == 0 {
				t.Errorf("chat %q: no chunk stamped in llmsim's process", c.key)
			}
		}
		if len(delivery) == 0 {
			t.Errorf("through %v: no chunk delivered", through)
		}
		h := rig.hops(rs, through)
		for i, c := range rs {
			if h.arrived[i] <= 0 {
				t.Errorf("chat %q: arrived at llmsim %v after its start: want after it", c.key, h.arrived[i])
			}
			if through && h.dispatched[i] > h.arrived[i] {
				t.Errorf("chat %q: arrived at llmsim %v after its start, dispatched %v: want after its dispatch", c.key, h.arrived[i], h.dispatched[i])
			}
		}
	}
}

// TestStreamRigClientApartSignal: with the load client in a process of
// its own, a round's onDelta calls (one a chat) all come while its chats
// are still open, held at llmsim after their first chunk, as
// BenchmarkStream2000ClientApart needs them; then the answers end whole.
func TestStreamRigClientApartSignal(t *testing.T) {
	const n = 3
	rig := newStreamRig(t, n, 1, rigOpts{clientApart: true})
	defer rig.stop()
	for _, through := range []bool{false, true} {
		wait, release := rig.tap.holdNext(n)
		var got sync.WaitGroup
		got.Add(n)
		done := make(chan []chatResult)
		go func() { done <- rig.run(t.Context(), n, fmt.Sprint("signal-", through), through, got.Done) }()
		wait()
		got.Wait() // hangs, and the test times out, if the signal never comes
		select {
		case <-done:
			t.Fatalf("through %v: the round ended while its answers were held", through)
		default:
		}
		release()
		rig.measure(t, <-done)
	}
}

// TestStreamRigClientApart checks the rig with the load client in a
// process of its own, llmsim in this process and in one of its own too:
// chats through batcherd and direct come back from the client's process
// whole, every chunk llmsim stamped reaches its client (measure), the
// hops of the chats through batcherd are in order, and the client's
// process reports CPU spent.
func TestStreamRigClientApart(t *testing.T) {
	const n = 3
	for _, simApart := range []bool{false, true} {
		t.Run(fmt.Sprint("simApart=", simApart), func(t *testing.T) {
			rig := newStreamRig(t, n, 1, rigOpts{stamp: true, simApart: simApart, clientApart: true})
			defer rig.stop()
			for _, through := range []bool{false, true} {
				rs := rig.run(t.Context(), n, fmt.Sprint("client-apart-", through), through, nil)
				_, delivery := rig.measure(t, rs)
				if len(delivery) < n {
					t.Errorf("through %v: %d chunks delivered, want at least %d", through, len(delivery), n)
				}
				h := rig.hops(rs, through)
				for i, c := range rs {
					if through && (h.sent[i] < 0 || h.handler[i] <= 0 || h.handler[i] > h.decoded[i] ||
						h.decoded[i] > h.dispatched[i] || h.dispatched[i] > h.arrived[i]) {
						t.Errorf("chat %q: sent %v, handler %v, decoded %v, dispatched %v, arrived %v after its start: want them in that order",
							c.key, h.sent[i], h.handler[i], h.decoded[i], h.dispatched[i], h.arrived[i])
					}
					if h.arrived[i] <= 0 {
						t.Errorf("chat %q: arrived at llmsim %v after its start: want after it", c.key, h.arrived[i])
					}
				}
			}
			if all, own := rig.cpu(t); all <= own {
				t.Errorf("CPU of both processes %v, of this one %v: want the load client's counted", all, own)
			}
		})
	}
}
