package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// throttled is a status that asks the caller to come back after delay.
func throttled(t *testing.T, code codes.Code, delay time.Duration) *status.Status {
	t.Helper()
	st, err := status.New(code, "queue full: capacity 1000").WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// scripted answers the i-th Submit with answers[i] (the last one repeats)
// and records when each call arrived.
type scripted struct {
	mu      sync.Mutex
	answers []func() (*batcherv1.SubmitResponse, error)
	calls   []time.Time
	called  chan struct{} // one send per call, when not nil
}

func (s *scripted) server() *fakeServer {
	return &fakeServer{submit: func(context.Context, *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
		s.mu.Lock()
		s.calls = append(s.calls, time.Now())
		a := s.answers[min(len(s.calls), len(s.answers))-1]
		s.mu.Unlock()
		if s.called != nil {
			s.called <- struct{}{}
		}
		return a()
	}}
}

func (s *scripted) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func fail(st *status.Status) func() (*batcherv1.SubmitResponse, error) {
	return func() (*batcherv1.SubmitResponse, error) { return nil, st.Err() }
}

func failedCompletion(st *status.Status) func() (*batcherv1.SubmitResponse, error) {
	return func() (*batcherv1.SubmitResponse, error) {
		return &batcherv1.SubmitResponse{Completion: &batcherv1.Completion{Id: "x", Error: st.Proto()}}, nil
	}
}

func ok() (*batcherv1.SubmitResponse, error) {
	return &batcherv1.SubmitResponse{Completion: &batcherv1.Completion{Id: "x", Output: &batcherv1.Completion_Text{Text: "done"}}}, nil
}

func TestSubmitRetriesOnRetryInfo(t *testing.T) {
	const delay = 30 * time.Millisecond
	tests := []struct {
		name      string
		opts      []client.Option
		answers   func(t *testing.T) []func() (*batcherv1.SubmitResponse, error)
		wantCalls int
		wantCode  codes.Code
		wantText  string
	}{
		{
			name: "resource exhausted, then success",
			answers: func(t *testing.T) []func() (*batcherv1.SubmitResponse, error) {
				return []func() (*batcherv1.SubmitResponse, error){fail(throttled(t, codes.ResourceExhausted, delay)), ok}
			},
			wantCalls: 2, wantCode: codes.OK, wantText: "done",
		},
		{
			name: "unavailable in the completion, twice, then success",
			answers: func(t *testing.T) []func() (*batcherv1.SubmitResponse, error) {
				st := throttled(t, codes.Unavailable, delay)
				return []func() (*batcherv1.SubmitResponse, error){failedCompletion(st), failedCompletion(st), ok}
			},
			wantCalls: 3, wantCode: codes.OK, wantText: "done",
		},
		{
			name: "attempts are bounded",
			answers: func(t *testing.T) []func() (*batcherv1.SubmitResponse, error) {
				return []func() (*batcherv1.SubmitResponse, error){fail(throttled(t, codes.ResourceExhausted, delay))}
			},
			wantCalls: client.DefaultMaxAttempts, wantCode: codes.ResourceExhausted,
		},
		{
			name: "WithMaxAttempts",
			opts: []client.Option{client.WithMaxAttempts(5)},
			answers: func(t *testing.T) []func() (*batcherv1.SubmitResponse, error) {
				return []func() (*batcherv1.SubmitResponse, error){fail(throttled(t, codes.ResourceExhausted, 0))}
			},
			wantCalls: 5, wantCode: codes.ResourceExhausted,
		},
		{
			name: "WithoutRetry",
			opts: []client.Option{client.WithoutRetry()},
			answers: func(t *testing.T) []func() (*batcherv1.SubmitResponse, error) {
				return []func() (*batcherv1.SubmitResponse, error){fail(throttled(t, codes.ResourceExhausted, delay)), ok}
			},
			wantCalls: 1, wantCode: codes.ResourceExhausted,
		},
		{
			name: "no RetryInfo, no retry",
			answers: func(*testing.T) []func() (*batcherv1.SubmitResponse, error) {
				return []func() (*batcherv1.SubmitResponse, error){fail(status.New(codes.ResourceExhausted, "full")), ok}
			},
			wantCalls: 1, wantCode: codes.ResourceExhausted,
		},
		{
			name: "another code with RetryInfo, no retry",
			answers: func(t *testing.T) []func() (*batcherv1.SubmitResponse, error) {
				return []func() (*batcherv1.SubmitResponse, error){fail(throttled(t, codes.Internal, delay)), ok}
			},
			wantCalls: 1, wantCode: codes.Internal,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &scripted{answers: tt.answers(t)}
			c := client.New(serve(t, s.server()), tt.opts...)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			comp, err := c.Submit(ctx, client.Complete("m", "p"))
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("Submit: code %v (%v), want %v", got, err, tt.wantCode)
			}
			if got := comp.GetText(); got != tt.wantText {
				t.Errorf("Submit: text %q, want %q", got, tt.wantText)
			}
			if got := s.count(); got != tt.wantCalls {
				t.Errorf("service saw %d calls, want %d", got, tt.wantCalls)
			}
		})
	}
}

// The client waits at least the delay the RetryInfo gives before it sends
// again.
func TestSubmitWaitsRetryDelay(t *testing.T) {
	const delay = 50 * time.Millisecond
	s := &scripted{answers: []func() (*batcherv1.SubmitResponse, error){fail(throttled(t, codes.ResourceExhausted, delay)), ok}}
	c := client.New(serve(t, s.server()))
	if _, err := c.Submit(t.Context(), client.Complete("m", "p")); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) != 2 {
		t.Fatalf("service saw %d calls, want 2", len(s.calls))
	}
	if gap := s.calls[1].Sub(s.calls[0]); gap < delay {
		t.Errorf("second call came %v after the first, want at least the RetryInfo's %v", gap, delay)
	}
}

// A delay that outlasts the caller's deadline is not waited: the service's
// error comes back at once.
func TestSubmitNoRetryPastDeadline(t *testing.T) {
	s := &scripted{answers: []func() (*batcherv1.SubmitResponse, error){fail(throttled(t, codes.ResourceExhausted, time.Hour)), ok}}
	c := client.New(serve(t, s.server()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := c.Submit(ctx, client.Complete("m", "p"))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Submit: %v, want the service's RESOURCE_EXHAUSTED", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Submit waited until the deadline: %v", ctx.Err())
	}
	if got := s.count(); got != 1 {
		t.Errorf("service saw %d calls, want 1", got)
	}
}

// The caller's cancellation during the wait ends Submit with CANCELLED.
func TestSubmitCancelDuringRetryWait(t *testing.T) {
	s := &scripted{
		answers: []func() (*batcherv1.SubmitResponse, error){fail(throttled(t, codes.ResourceExhausted, time.Hour)), ok},
		called:  make(chan struct{}, 1),
	}
	c := client.New(serve(t, s.server()))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx, client.Complete("m", "p"))
		done <- err
	}()
	<-s.called
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("Submit: %v, want CANCELLED", err)
	}
	if got := s.count(); got != 1 {
		t.Errorf("service saw %d calls, want 1", got)
	}
}

func TestWithMaxAttemptsPanicsBelowOne(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("WithMaxAttempts(0) did not panic")
		}
	}()
	client.WithMaxAttempts(0)
}
