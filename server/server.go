package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Defaults of the options.
const (
	// DefaultStreamWindow is how many requests one stream may have in flight.
	DefaultStreamWindow = 256
	// DefaultSummaryInterval is how often a stream gets a StreamSummary when
	// its options do not say.
	DefaultSummaryInterval = time.Second
)

// Option configures a Server.
//
// An invalid value makes New return an error naming the option; check
// options without building a Server with ValidateOptions, as batcherd does
// when it loads its configuration. Nothing is clamped.
type Option func(*config)

// WithStreamWindow bounds the accepted requests one SubmitStream may have
// in flight (plus rejections not yet sent). While the window is full the
// server stops reading the stream. Default DefaultStreamWindow; less than 1
// is invalid.
func WithStreamWindow(n int) Option { return func(c *config) { c.window = n } }

// WithSummaryInterval sets how often streams get a StreamSummary unless
// their StreamOptions say otherwise. Default DefaultSummaryInterval; a value
// outside MinSummaryInterval..MaxSummaryInterval is invalid.
func WithSummaryInterval(d time.Duration) Option { return func(c *config) { c.interval = d } }

// WithLogger sets where the server logs. Default slog.Default(); nil is
// ignored.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithTracerProvider sets where the server records its own spans: one for
// each stream request it rejects, as a child of the request's traceparent
// (or of the stream's span), so that a rejection shows in the caller's
// trace. Request and batch spans are the core's (batcher.WithTracerProvider).
// Default: no spans; nil is ignored.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithPropagator sets how a stream request's traceparent and tracestate are
// read. Default the W3C trace context propagator; nil is ignored.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithAccessFunc says what the caller of each RPC may ask of the core,
// from the RPC's context (batcherd: security.AccessFrom, the identity its
// authentication interceptor put there). Submit and every request of a
// SubmitStream are admitted with it after translation
// (batcher.Access.Admit): a route the tenant may not use, or a priority
// above its ceiling in refuse mode, is PERMISSION_DENIED (on a stream a
// Rejection, and the stream goes on); the request carries the tenant's
// name, which the core's weights and quotas go by. A stream whose Access
// is revoked refuses new requests with UNAUTHENTICATED, finishes what it
// accepted and ends. Default none: every request is admitted with no
// tenant; nil is ignored.
func WithAccessFunc(f func(context.Context) *batcher.Access) Option {
	return func(c *config) { c.accessOf = f }
}

// connOf is the caller's connection: its remote address, for the lane
// cap's fair share per connection (batcher.Request.Conn).
func connOf(ctx context.Context) net.Addr {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr
	}
	return nil
}

// accessOf returns what the caller of ctx's RPC may ask, or nil: anything.
func (s *Server) accessOf(ctx context.Context) *batcher.Access {
	if f := s.cfg.accessOf; f != nil {
		return f(ctx)
	}
	return nil
}

type config struct {
	accessOf       func(context.Context) *batcher.Access
	window         int
	maxStreams     int
	maxPending     int
	interval       time.Duration
	logger         *slog.Logger
	tracerProvider trace.TracerProvider
	traceRejects   bool
	propagator     propagation.TextMapPropagator
}

const tracerName = "github.com/batcherhq/batcher/server"

// attrRequestID names the request on the server's spans, as the core does.
const attrRequestID = attribute.Key("batcher.request.id")

// newConfig resolves opts, or returns an error naming each invalid one
// ("stream window: must be at least 1, got 0").
func newConfig(opts []Option) (config, error) {
	c := config{window: DefaultStreamWindow, interval: DefaultSummaryInterval}
	for _, o := range opts {
		o(&c)
	}
	var errs []error
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.window < 1 {
		errs = append(errs, badOption("stream_window", "must be at least 1, got %d", c.window))
	}
	if c.interval < MinSummaryInterval || c.interval > MaxSummaryInterval {
		errs = append(errs, badOption("summary_interval", "must be %v to %v, got %v", MinSummaryInterval, MaxSummaryInterval, c.interval))
	}
	if c.tracerProvider == nil {
		c.tracerProvider = noop.NewTracerProvider()
	} else {
		c.traceRejects = true
	}
	if c.propagator == nil {
		c.propagator = propagation.TraceContext{}
	}
	errs = append(errs, c.checkLimits()...)
	return c, errors.Join(errs...)
}

// badOption is an invalid option as a *batcher.SettingError, path its name
// in snake_case ("stream_window"), so that a caller finds the option with
// errors.As as it finds the core's.
func badOption(path, format string, args ...any) error {
	return &batcher.SettingError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// ValidateOptions reports every invalid option among opts, each a
// *batcher.SettingError that names it in words ("summary interval: must be
// 100ms to 1h0m0s, got 1ms"): what would make New fail.
func ValidateOptions(opts ...Option) error {
	_, err := newConfig(opts)
	return err
}

// Server is the BatcherService: it translates RPCs into calls on a
// batcher.Batcher and the core's results and errors back into messages and
// statuses. It holds no batching logic.
type Server struct {
	batcherv1.UnimplementedBatcherServiceServer

	core   *batcher.Batcher
	cfg    config
	log    *slog.Logger
	tracer trace.Tracer
	// traceRejects: a tracer provider was given, so rejections get spans.
	traceRejects bool
	health       *health.Server

	idPrefix string
	idSeq    atomic.Uint64

	// mu orders stream registration against Shutdown: no stream registers
	// once shutting is set, so streams.Wait sees them all.
	mu       sync.Mutex
	shutting bool
	streams  sync.WaitGroup
	live     map[*stream]struct{} // open streams, for StreamStats

	budget *budget     // answers owed on streams, server-wide (limits.go)
	items  *spareItems // the streams' cleared items, between streams (stream.go)

	closeOnce sync.Once
	closing   chan struct{} // closed once the core has drained: streams end

	watchesOnce sync.Once
	watchesEnd  chan struct{} // closed when the drain begins: health watches end
	openStreams atomic.Int64  // SubmitStreams open now
	// relayed counts the messages this server's SubmitStreamed handlers
	// and SubmitStream senders have sent of the deltas they took from the
	// core's buffers, each after a wake-up, rather than the upstream's
	// reader straight: tests and benchmarks read it.
	relayed atomic.Int64

	// testHookRecvDone, when set (before any stream opens), is called when
	// a stream's receiver has seen the caller's half-close or a broken
	// receive: the one stream event a test cannot observe on the wire.
	testHookRecvDone func()
	// testHookBudgetTaken, when set (before any stream opens), is called
	// when a stream's receiver has taken a budget token and not yet counted
	// it as the stream's.
	testHookBudgetTaken func()
}

// healthService is the name under which the BatcherService reports its
// health, besides the server-wide "".
var healthService = batcherv1.BatcherService_ServiceDesc.ServiceName

// New returns a Server in front of core, or an error naming every invalid
// option (see Option and ValidateOptions).
func New(core *batcher.Batcher, opts ...Option) (*Server, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("server: invalid options: %w", err)
	}
	var prefix [6]byte
	_, _ = rand.Read(prefix[:]) // never fails (crypto/rand)
	s := &Server{
		core:         core,
		cfg:          cfg,
		log:          cfg.logger,
		traceRejects: cfg.traceRejects,
		tracer:       cfg.tracerProvider.Tracer(tracerName),
		health:       health.NewServer(),
		idPrefix:     "srv-" + hex.EncodeToString(prefix[:]) + "-",
		closing:      make(chan struct{}),
		watchesEnd:   make(chan struct{}),
		budget:       newBudget(cfg.maxPending),
		items:        &spareItems{max: cfg.maxPending},
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(healthService, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// Register registers the BatcherService, gRPC health checking
// (grpc.health.v1.Health) and server reflection on gs, so that grpcurl
// works without the proto files.
func (s *Server) Register(gs *grpc.Server) {
	batcherv1.RegisterBatcherServiceServer(gs, s)
	healthpb.RegisterHealthServer(gs, &healthServer{Server: s.health, end: s.watchesEnd})
	reflection.Register(gs)
}

// Shutdown stops the service gracefully, in this order:
//
//  1. health checks answer NOT_SERVING, so load balancers stop sending,
//     and health watches end;
//  2. the core shuts down with ctx: admission stops (new requests get
//     UNAVAILABLE) and every pending request is sent and finished, or ended
//     with UNAVAILABLE when ctx ends first;
//  3. every open SubmitStream sends the terminal results it owes and its
//     final summary, and ends with UNAVAILABLE "server shutting down" (OK if
//     its caller had already half-closed).
//
// Shutdown is Drain then Deliver with the same ctx; a caller that wants the
// aborted requests' results delivered after the drain deadline calls the two
// with contexts of their own. It returns once every stream has ended, or
// when ctx ends (then with an error wrapping ctx's; a stream whose caller
// stopped reading cannot finish). The caller then calls gs.GracefulStop,
// bounded by gs.Stop. Calling Shutdown again waits again.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.Drain(ctx)
	if derr := s.Deliver(ctx); derr != nil && err == nil {
		err = derr
	}
	return err
}

// enterStream registers a stream, or returns the status that refuses it:
// UNAVAILABLE once Shutdown has begun, RESOURCE_EXHAUSTED when
// WithMaxStreams streams are open.
func (s *Server) enterStream() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting {
		return status.Error(codes.Unavailable, "server shutting down")
	}
	if n := s.openStreams.Load(); n >= int64(s.cfg.maxStreams) {
		return status.Errorf(codes.ResourceExhausted, "too many streams: the server serves at most %d at once", s.cfg.maxStreams)
	}
	s.streams.Add(1)
	s.openStreams.Add(1)
	return nil
}

// newID returns an id for a request that came without one.
func (s *Server) newID() string {
	var buf idBuf
	return string(s.appendID(buf[:0])) // one allocation
}

// idBuf holds an id newID makes: the prefix (17 bytes) and a base-36
// uint64 (at most 13).
type idBuf [32]byte

// newIDIn is newID written into buf, which the id shares: no allocation
// of its own. buf must never change afterwards, and the id keeps buf's
// whole block alive wherever it is kept.
func (s *Server) newIDIn(buf *idBuf) string {
	b := s.appendID(buf[:0])
	return unsafe.String(&b[0], len(b))
}

func (s *Server) appendID(b []byte) []byte {
	return strconv.AppendUint(append(b, s.idPrefix...), s.idSeq.Add(1), 36)
}

// NewGRPCServer returns a grpc.Server with the service's interceptors:
// the otelgrpc stats handler, which starts a span per RPC (its parent taken
// from the caller's W3C traceparent metadata) with tp (the global provider
// when nil), and panic recovery for unary and streaming handlers, which
// logs the panic and its stack with slog.Default and answers INTERNAL
// without detail, and a codec under which a request that does not decode
// gets INVALID_ARGUMENT (codec.go). RPCs run on a pool of streamWorkers()
// goroutines while one is free, else each on a goroutine of its own; the
// workers start with the server, so stop it (Stop or GracefulStop) even
// when it never serves. extra options are appended, so they may override
// any of these.
func NewGRPCServer(tp trace.TracerProvider, extra ...grpc.ServerOption) *grpc.Server {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	rec := recovery.WithRecoveryHandlerContext(recoverPanic)
	dc := newDecodeCodec()
	opts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		)),
		grpc.ForceServerCodecV2(dc),
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(rec), dc.unary),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(rec), dc.stream),
		grpc.NumStreamWorkers(streamWorkers()),
	}
	return grpc.NewServer(append(opts, extra...)...)
}

// streamWorkers is the size of NewGRPCServer's pool of RPC goroutines: 32
// for each P (GOMAXPROCS).
//
// Without a pool, grpc-go starts a goroutine for each RPC. Its stack
// starts at the process's average size and grows, with a copy, while
// grpc-go reads the request, before any handler runs: about 9% of a
// unary Submit's CPU (profiles in BENCHMARKS.md). A pooled goroutine keeps
// its grown stack from one RPC to the next. An RPC that finds every worker
// busy (a unary Submit holds its worker while it waits for its batch, a
// stream for its whole life) runs on a goroutine of its own, as without a
// pool: the pool is not a limit. More workers than the RPCs in flight
// cost speed: an idle worker's stack leaves the cache while the others
// take their turns (256 workers for 50 callers, on 2 Ps, ran 10% slower
// than 64).
func streamWorkers() uint32 { return uint32(32 * runtime.GOMAXPROCS(0)) }

// errPanic is what a caller sees when a handler panicked.
var errPanic = status.Error(codes.Internal, "internal error")

func recoverPanic(ctx context.Context, p any) error {
	method, _ := grpc.Method(ctx)
	slog.Default().ErrorContext(ctx, "server: handler panicked", "method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return errPanic
}
