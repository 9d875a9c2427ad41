package batcher

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// addr is a caller's connection.
func addr(port int) net.Addr { return &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: port} }

// At the cap, lanes that went idle make room at once: a caller whose
// requests each opened a lane (each with its own seed, in the issue) does
// not lock out the next request with other parameters until those lanes'
// idle timeout.
func TestLaneCapEvictsIdleLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &fakeBackend{}, 4, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, WithMaxLanes(4), WithIdleLaneTimeout(time.Hour))
		for i := range int32(4) {
			wantOKDo(t, b, inLane("seeded", PriorityNormal, i))
		}
		synctest.Wait() // every owner has seen its lane empty
		if n := len(b.Lanes()); n != 4 {
			t.Fatalf("%d lanes open, want the 4 idle ones", n)
		}
		for i := range int32(3) {
			r := inLane("later", PriorityNormal, 10+i)
			if _, err := b.Do(context.Background(), r); err != nil {
				t.Fatalf("a new lane at the cap with 4 idle lanes: %v", err)
			}
		}
		synctest.Wait()
		if n := len(b.Lanes()); n > 4 {
			t.Errorf("%d lanes open, over the cap of 4", n)
		}
	})
}

// A caller holds at most its fair share of the cap while others hold
// lanes: per tenant, then per connection. The refusal says when a lane is
// expected to make room, not a fixed second.
func TestLaneCapFairShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		bc := BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: 200 * time.Millisecond, MaxWait: 200 * time.Millisecond}
		b := newTest(t, be, 4, bc, WithMaxLanes(4), WithIdleLaneTimeout(time.Hour))
		open := func(id string, lane int32, conn net.Addr, tenant string) (*Call, error) {
			r := inLane(id, PriorityNormal, lane)
			r.Conn, r.Tenant = conn, tenant
			return b.Submit(context.Background(), r)
		}
		var calls []*Call
		for i, conn := range []net.Addr{addr(1), addr(1), addr(2)} {
			c, err := open("q", int32(i), conn, "")
			if err != nil {
				t.Fatalf("lane %d: %v", i, err)
			}
			calls = append(calls, c)
		}
		// Connection 1 holds 2 of 4 lanes, its share with connection 2
		// holding one: a third is refused though a lane is free.
		_, err := open("q", 3, addr(1), "")
		var le *LaneLimitError
		if !errors.As(err, &le) || !errors.Is(err, ErrTooManyLanes) || le.Share != 2 || le.Held != 2 {
			t.Fatalf("connection 1's third lane: %v, want a LaneLimitError for its share of 2", err)
		}
		if le.RetryAfter <= 0 || le.RetryAfter > bc.MaxWait {
			t.Errorf("RetryAfter %v, want the wait until its queued lanes send their batches (at most %v)", le.RetryAfter, bc.MaxWait)
		}
		c, err := open("q", 3, addr(2), "") // connection 2 is under its share
		if err != nil {
			t.Fatalf("connection 2's second lane: %v", err)
		}
		calls = append(calls, c)
		if _, err := open("q", 4, addr(3), "team-b"); !errors.As(err, &le) || le.Share != 0 {
			t.Fatalf("a new tenant at the full cap, no lane idle: %v, want the cap's refusal", err)
		}
		close(be.hold)
		for _, c := range calls {
			<-c.Done()
			wantOK(t, c)
		}
		synctest.Wait()
		// The lanes idle now: they make room for the new tenant.
		if _, err := open("b", 10, addr(3), "team-b"); err != nil {
			t.Fatalf("team-b's lane once the others are idle: %v", err)
		}
	})
}

// Tenants share the cap first, then each tenant's connections its share.
func TestLaneCapTenantShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 8, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, WithMaxLanes(4), WithIdleLaneTimeout(time.Hour))
		var calls []*Call
		open := func(lane int32, conn net.Addr, tenant string) error {
			r := inLane("q", PriorityNormal, lane)
			r.Conn, r.Tenant = conn, tenant
			c, err := b.Submit(context.Background(), r)
			if err == nil {
				calls = append(calls, c)
			}
			return err
		}
		for i, step := range []struct {
			lane   int32
			conn   int
			tenant string
			share  int // 0: admitted
		}{
			{0, 1, "a", 0},
			{1, 2, "b", 0},
			{2, 2, "b", 0},
			{3, 3, "b", 2}, // team-b holds 2, its half of 4, whatever the connection
			{3, 4, "a", 0}, // team-a's second connection: 1 of team-a's 2
			{4, 1, "a", 2}, // team-a holds its 2
		} {
			err := open(step.lane, addr(step.conn), step.tenant)
			var le *LaneLimitError
			switch {
			case step.share == 0 && err != nil:
				t.Fatalf("step %d: %v, want admitted", i, err)
			case step.share > 0 && (!errors.As(err, &le) || le.Share != step.share):
				t.Fatalf("step %d: %v, want refused at a share of %d", i, err, step.share)
			}
		}
		close(be.hold)
		for _, c := range calls {
			<-c.Done()
			wantOK(t, c)
		}
	})
}
