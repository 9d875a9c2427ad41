package batcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeCoordinator is a hand-written Coordinator: it books every batch,
// records what it was asked and told, and may refuse with an error.
type fakeCoordinator struct {
	mu       sync.Mutex
	local    LocalBudget
	demands  []Demand
	outcomes []Outcome
	refuse   error // Acquire fails with it when set
	ticket   Ticket
	released chan struct{} // receives after each Release
}

func (f *fakeCoordinator) Budget(_ string, local LocalBudget) SharedBudget {
	f.mu.Lock()
	f.local = local
	f.mu.Unlock()
	return f
}

func (f *fakeCoordinator) Acquire(_ context.Context, d Demand) (Ticket, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.demands = append(f.demands, d)
	if f.refuse != nil {
		return Ticket{}, f.refuse
	}
	t := f.ticket
	t.Release = func(o Outcome) {
		f.mu.Lock()
		f.outcomes = append(f.outcomes, o)
		f.mu.Unlock()
		if f.released != nil {
			f.released <- struct{}{}
		}
	}
	return t, nil
}

func TestCoordinatorBooksAndReleasesEachBatch(t *testing.T) {
	co := &fakeCoordinator{released: make(chan struct{}, 16)}
	fb := &fakeBackend{}
	b := newTest(t, fb, 2, BatchConfig{MaxBatchSize: 2, MinBatchSize: 2}, WithCoordinator(co), withLimits("be", 600, 60000))
	var calls []*Call
	for i := range 4 {
		calls = append(calls, submit(t, b, req(fmt.Sprint(i), PriorityNormal)))
	}
	for _, c := range calls {
		<-c.Done()
		wantOK(t, c)
	}
	for range fb.calls.Load() {
		<-co.released
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if n := int(fb.calls.Load()); len(co.demands) != n || len(co.outcomes) != n {
		t.Fatalf("%d upstream calls, %d bookings, %d releases: want one each a batch", n, len(co.demands), len(co.outcomes))
	}
	d := co.demands[0]
	if d.Requests != 1 || d.Tokens <= 0 || d.RPM.PerMinute != 600 || !d.RPM.Adaptive || d.TPM.PerMinute != 60000 || d.MaxConcurrency != 2 {
		t.Fatalf("demand %+v", d)
	}
	for _, o := range co.outcomes {
		if !o.Called || !o.Succeeded || o.RateLimited || o.Requests != 1 || o.Tokens <= 0 || o.Tokens%2 != 0 { // the usage reported: 2 a request
			t.Fatalf("outcome %+v", o)
		}
	}
}

func TestCoordinatorHoldOpenFailsFastWithoutFallback(t *testing.T) {
	co := &fakeCoordinator{}
	b := newTest(t, &fakeBackend{}, 2, BatchConfig{}, WithCoordinator(co))
	co.local.HoldOpen(time.Now().Add(time.Minute))
	_, err := b.Submit(context.Background(), req("a", PriorityUrgent))
	if !errors.Is(err, ErrNoBackend) {
		t.Fatalf("Submit while the fleet holds the backend open: %v, want ErrNoBackend", err)
	}
}

func TestCoordinatorRefusalEndsTheBatchsCalls(t *testing.T) {
	co := &fakeCoordinator{refuse: fmt.Errorf("%w: circuit open on backend %q (another replica)", ErrNoBackend, "be")}
	fb := &fakeBackend{}
	b := newTest(t, fb, 2, BatchConfig{}, WithCoordinator(co))
	c := submit(t, b, req("a", PriorityUrgent))
	<-c.Done()
	wantErr(t, c, ErrNoBackend)
	if n := fb.calls.Load(); n != 0 {
		t.Fatalf("%d upstream calls after the fleet refused", n)
	}
}

func TestCoordinatorShareCapsConcurrency(t *testing.T) {
	co := &fakeCoordinator{}
	fb := &fakeBackend{hold: make(chan struct{}), started: make(chan *Batch, 8)}
	b := newTest(t, fb, 4, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, WithCoordinator(co))
	co.local.Share(0.25) // one slot of four
	var calls []*Call
	for i := range 3 {
		calls = append(calls, submit(t, b, req(fmt.Sprint(i), PriorityUrgent)))
	}
	<-fb.started
	for _, st := range b.Stats() {
		if st.Limit != 1 {
			t.Fatalf("concurrency limit on a quarter share: %d, want 1", st.Limit)
		}
	}
	if n := fb.inflight.Load(); n != 1 {
		t.Fatalf("%d calls in flight on a quarter of four slots", n)
	}
	co.local.Share(1)
	close(fb.hold)
	for _, c := range calls {
		<-c.Done()
		wantOK(t, c)
	}
	if m := fb.maxInflight.Load(); m > 3 {
		t.Fatalf("max in flight %d", m)
	}
}

func TestCoordinatorPauseHoldsDispatch(t *testing.T) {
	co := &fakeCoordinator{}
	fb := &fakeBackend{}
	b := newTest(t, fb, 2, BatchConfig{}, WithCoordinator(co))
	// Another replica was told to wait an hour: this one waits too, and a
	// request whose deadline comes first fails early naming the pause.
	co.local.Pause(time.Now().Add(time.Hour))
	c := submit(t, b, req("a", PriorityUrgent))
	<-c.Done()
	wantErr(t, c, ErrBudgetExhausted)
	var be *BudgetError
	if !errors.As(c.Result().Err, &be) || be.Budget != budgetPause {
		t.Fatalf("err %v, want the pause named", c.Result().Err)
	}
	if n := fb.calls.Load(); n != 0 {
		t.Fatalf("%d upstream calls during the fleet's pause", n)
	}
}
