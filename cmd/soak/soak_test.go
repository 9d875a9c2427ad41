package main

import (
	"context"
	"flag"
	"net"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestIsTransport(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		msg  string
		want bool
	}{
		{codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`, true},
		{codes.Unavailable, "error reading from server: EOF", true},
		{codes.Unavailable, "transport is closing", true},
		{codes.Unavailable, "the connection is draining", true},
		// batcherd's own answers, a terminal result even when they quote
		// an upstream's connection trouble
		{codes.Unavailable, `upstream unreachable: backend "sim": Post "http://127.0.0.1:9/v1/completions": read tcp: connection reset by peer`, false},
		{codes.Unavailable, "server shut down before the request completed", false},
		{codes.Internal, "transport is closing", false},
	} {
		if got := isTransport(status.New(tc.code, tc.msg)); got != tc.want {
			t.Errorf("isTransport(%v %q) = %v, want %v", tc.code, tc.msg, got, tc.want)
		}
	}
}

// TestHelp: -h says what soak is for and gives examples, then the flags.
func TestHelp(t *testing.T) {
	var out strings.Builder
	flag.CommandLine.SetOutput(&out)
	t.Cleanup(func() { flag.CommandLine.SetOutput(nil) })
	printUsage()
	help := out.String()
	if !strings.HasPrefix(help, "Usage: soak [flags]\n\nsoak drives the real batcherd") || !strings.Contains(help, "Examples:\n  # ") {
		t.Errorf("-h:\n%s", help)
	}
}

// TestDialAsBatchersClient: soak's connection carries the caller's trace
// context, as client.Dial's and batcherctl's do (client.DialOptions); a
// plain grpc.NewClient, which soak once used, sends none.
func TestDialAsBatchersClient(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []string, 1)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got <- md.Get("traceparent")
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	conn, err := dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithSpanContext(t.Context(), sc)
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if tp := <-got; len(tp) != 1 || !strings.Contains(tp[0], sc.TraceID().String()) {
		t.Errorf("traceparent %q, want one carrying trace %s", tp, sc.TraceID())
	}
}
