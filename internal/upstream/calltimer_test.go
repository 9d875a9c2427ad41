package upstream_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/internal/upstream"
)

var errPhase = errors.New("phase over")

// TestCallTimerStoppedInTime: a timer stopped before it fires ends
// nothing, and one stopped again (as Release does) still says so.
func TestCallTimerStoppedInTime(t *testing.T) {
	var p upstream.CallTimers
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ct := p.Start(cancel, time.Hour, errPhase)
	if ct.Stop() {
		t.Fatal("Stop reports a firing that never happened")
	}
	if ct.Stop() {
		t.Fatal("a second Stop reports a firing that never happened")
	}
	ct.Release()
	if ctx.Err() != nil {
		t.Fatalf("context ended: %v", context.Cause(ctx))
	}
}

// TestCallTimerFires: a timer left running ends the call with its cause;
// Stop then reports it, and the fired timer is never handed out again.
func TestCallTimerFires(t *testing.T) {
	var p upstream.CallTimers
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ct := p.Start(cancel, time.Millisecond, errPhase)
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), errPhase) {
		t.Fatalf("cause %v, want the phase's", context.Cause(ctx))
	}
	if !ct.Stop() {
		t.Fatal("Stop does not report the firing")
	}
	ct.Release()
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel2(nil)
	for range 100 { // a pool may drop what it is given, never make it up
		ct2 := p.Start(cancel2, time.Hour, errPhase)
		if ct2 == ct {
			t.Fatal("a fired timer was reused")
		}
		ct2.Release()
	}
	if ctx2.Err() != nil {
		t.Fatalf("a later call ended: %v", context.Cause(ctx2))
	}
}

// blockingBody is a response body that never ends: a read waits for the
// call's context, then fails, as a cancelled call's body does.
type blockingBody struct{ ctx context.Context }

func (b blockingBody) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, context.Cause(b.ctx)
}

// TestDrainCutsAResponseThatGoesOn: after the header phase was stopped in
// time, Drain arms the same timer again, and a body that does not end is
// cut with Drain's cause.
func TestDrainCutsAResponseThatGoesOn(t *testing.T) {
	var p upstream.CallTimers
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ct := p.Start(cancel, time.Hour, context.DeadlineExceeded)
	if ct.Stop() {
		t.Fatal("the header phase fired")
	}
	upstream.Drain(blockingBody{ctx}, ct, errPhase)
	if !errors.Is(context.Cause(ctx), errPhase) {
		t.Fatalf("cause %v, want the drain's", context.Cause(ctx))
	}
	ct.Release()
}

// TestDrainOfAnEndedResponse: a body that ends at once is read to its end
// and the call goes on.
func TestDrainOfAnEndedResponse(t *testing.T) {
	var p upstream.CallTimers
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ct := p.Start(cancel, time.Hour, context.DeadlineExceeded)
	ct.Stop()
	body := strings.NewReader("0\r\n\r\n")
	upstream.Drain(body, ct, errPhase)
	if n, _ := io.Copy(io.Discard, body); n != 0 || ctx.Err() != nil {
		t.Fatalf("%d bytes left, context %v", n, ctx.Err())
	}
	ct.Release()
}
