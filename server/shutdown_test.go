package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestDrainEndsHealthWatch: a health Watch gets NOT_SERVING and ends with
// UNAVAILABLE when the drain begins, so that it cannot hold GracefulStop.
func TestDrainEndsHealthWatch(t *testing.T) {
	e := newEnv(t, newFake())
	ctx := testCtx(t)
	w, err := healthpb.NewHealthClient(e.conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: healthService})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first message %v, %v", m, err)
	}
	if err := e.srv.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if err := e.srv.Deliver(ctx); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	var last healthpb.HealthCheckResponse_ServingStatus
	for {
		m, err := w.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("watch ended with %v, want UNAVAILABLE", err)
			}
			break
		}
		last = m.GetStatus()
	}
	if last != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("last status %v, want NOT_SERVING", last)
	}
}

// TestInvalidOptionsFail: an invalid option is an error naming it, and New
// refuses it instead of clamping it to the default.
func TestInvalidOptionsFail(t *testing.T) {
	err := ValidateOptions(WithStreamWindow(0), WithSummaryInterval(time.Millisecond))
	for _, want := range []string{"stream window: must be at least 1, got 0", "summary interval: must be 100ms to 1h0m0s, got 1ms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateOptions = %v, want it to say %q", err, want)
		}
	}
	if err := ValidateOptions(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	srv, err := New(nil, WithStreamWindow(-1))
	if srv != nil || err == nil || !strings.Contains(err.Error(), "stream window: must be at least 1, got -1") {
		t.Errorf("New with an invalid option = %v, %v; want no server and an error naming the option", srv, err)
	}
	var se *batcher.SettingError
	if !errors.As(err, &se) || se.Path != "stream_window" || se.Reason != "must be at least 1, got -1" {
		t.Errorf("New's error holds %+v, want the setting stream_window and its reason", se)
	}
}
