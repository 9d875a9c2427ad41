package stack

import "testing"

// TestGrow: Grow runs on a fresh goroutine's small stack and on a grown
// one (the runtime grows the stack in its prologue).
func TestGrow(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Grow()
		Grow()
	}()
	<-done
}

// TestHold: Hold runs f, on a fresh goroutine's small stack.
func TestHold(t *testing.T) {
	ran := make(chan bool, 1)
	go Hold(func() { ran <- true })
	if !<-ran {
		t.Fatal("f did not run")
	}
}

func BenchmarkGrowGrown(b *testing.B) {
	Grow()
	for b.Loop() {
		Grow()
	}
}
