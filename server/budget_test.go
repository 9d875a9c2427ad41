package server

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// budgetWaiter is one stream's receiver waiting in budget.acquire.
type budgetWaiter struct {
	held atomic.Int64
	turn budgetTurn
	done chan struct{}
	got  chan bool
}

func startWaiter(b *budget, held int64) *budgetWaiter {
	w := &budgetWaiter{done: make(chan struct{}), got: make(chan bool, 1)}
	w.turn.wake = make(chan struct{}, 1)
	w.held.Store(held)
	go func() { w.got <- b.acquire(&w.held, &w.turn, w.done, nil) }()
	return w
}

func acquired(ws []*budgetWaiter) (n int) {
	for _, w := range ws {
		select {
		case ok := <-w.got:
			if !ok {
				panic("acquire returned false without its stream ending")
			}
			w.got <- true // keep it readable
			n++
		default:
		}
	}
	return n
}

// Each token given back wakes one waiting stream, and every waiter gets a
// token in the end: none is lost, none woken for nothing.
func TestBudgetReleaseWakesOneWaiterPerToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const waiters = 50
		b := newBudget(4)
		for range 4 {
			if !b.tryTake() {
				t.Fatal("a budget with room refused a token")
			}
		}
		if b.tryTake() {
			t.Fatal("a spent budget gave a token")
		}
		ws := make([]*budgetWaiter, waiters)
		for i := range ws {
			ws[i] = startWaiter(b, streamFloor) // at the floor: must wait for room
		}
		synctest.Wait()
		if n := acquired(ws); n != 0 {
			t.Fatalf("%d waiters acquired from a spent budget", n)
		}
		b.release(1)
		synctest.Wait()
		if n := acquired(ws); n != 1 {
			t.Fatalf("one token given back: %d waiters acquired, want 1", n)
		}
		b.release(3)
		synctest.Wait()
		if n := acquired(ws); n != 4 {
			t.Fatalf("four tokens given back: %d waiters acquired, want 4", n)
		}
		for range waiters - 4 {
			b.release(1)
		}
		synctest.Wait()
		if n := acquired(ws); n != waiters {
			t.Fatalf("%d of %d waiters acquired after as many tokens came back", n, waiters)
		}
		if u := b.used.Load(); u != 4 {
			t.Fatalf("used = %d, want the budget's 4", u)
		}
		if len(b.queue) != 0 {
			t.Fatalf("%d waiters left queued", len(b.queue))
		}
	})
}

// A stream whose own tokens fall below the floor reads at once, whatever its
// place in the queue, and a stream that ends leaves the queue and passes on
// nothing it did not get.
func TestBudgetFloorWakeAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(1)
		if !b.tryTake() {
			t.Fatal("an empty budget refused a token")
		}
		first := startWaiter(b, streamFloor)
		reader := startWaiter(b, streamFloor)
		synctest.Wait()
		// The reader's sender delivered an answer: below the floor.
		reader.held.Add(-1)
		reader.turn.wake <- struct{}{}
		synctest.Wait()
		if acquired([]*budgetWaiter{reader}) != 1 {
			t.Fatal("a stream below the floor was not let read")
		}
		if acquired([]*budgetWaiter{first}) != 0 {
			t.Fatal("the floor wake let another stream take a token from a spent budget")
		}
		close(first.done)
		synctest.Wait()
		if ok := <-first.got; ok {
			t.Fatal("an ended stream acquired a token")
		}
		if len(b.queue) != 0 {
			t.Fatalf("%d waiters left queued after both left", len(b.queue))
		}
		if u := b.used.Load(); u != 2 {
			t.Fatalf("used = %d, want 2 (one token and one floor token)", u)
		}
	})
}

// Streams taking and giving back tokens of a small budget at once: no
// wake-up is lost (release skips the lock when it reads nobody queued,
// and a woken waiter reads whether release chose it without the lock), so
// every acquire returns and every token comes back.
func TestBudgetConcurrentSafe(t *testing.T) {
	const streams, rounds = 16, 300
	b := newBudget(3)
	// A lost wake-up leaves a waiter stuck: the watchdog ends the wait.
	stuck := make(chan struct{})
	watchdog := time.AfterFunc(30*time.Second, func() { close(stuck) })
	defer watchdog.Stop()
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			turn := budgetTurn{wake: make(chan struct{}, 1)}
			var held atomic.Int64
			held.Store(streamFloor) // at the floor: every token is the budget's to give
			for range rounds {
				if !b.acquire(&held, &turn, stuck, nil) {
					t.Error("a waiter was still waiting after 30 s: a wake-up was lost")
					return
				}
				runtime.Gosched()
				b.release(1)
			}
		})
	}
	wg.Wait()
	if u, q := b.used.Load(), b.queued.Load(); u != 0 || q != 0 {
		t.Fatalf("after every stream gave its tokens back: used %d, queued %d, want 0 and 0", u, q)
	}
}
