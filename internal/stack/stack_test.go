package stack

import "testing"

// TestHold: Hold runs f, on a fresh goroutine's small stack.
func TestHold(t *testing.T) {
	ran := make(chan bool, 1)
	go Hold(func() { ran <- true })
	if !<-ran {
		t.Fatal("f did not run")
	}
}
