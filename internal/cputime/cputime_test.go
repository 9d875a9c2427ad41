package cputime

import "testing"

// TestProcessGrows burns CPU and checks that Process counts it.
func TestProcessGrows(t *testing.T) {
	before := Process()
	if before <= 0 {
		t.Fatalf("Process() = %v before any work, want a positive time", before)
	}
	x := uint64(1)
	for i := range 50_000_000 {
		x = x*6364136223846793005 + uint64(i)
	}
	if after := Process(); after <= before {
		t.Fatalf("Process() went from %v to %v over a busy loop (%d)", before, after, x)
	}
}
