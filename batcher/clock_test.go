package batcher

import (
	"testing"
	"time"
)

// TestMono: monos order and subtract as the times they stand for, a time
// without a monotonic reading (a deadline made from a date) compares with
// the current time as it did as a time.Time, and a deadline beyond the
// last mono is taken as it.
func TestMono(t *testing.T) {
	k := newClock()
	now := k.now()
	nowM := k.monoOf(now)
	later := now.Add(1500 * time.Millisecond)
	if got := k.monoOf(later) - nowM; got != mono(1500*time.Millisecond) {
		t.Errorf("monoOf(now+1.5s) - monoOf(now) = %v", time.Duration(got))
	}
	if got := monoAt(later, nowM, now); got != k.monoOf(later) {
		t.Errorf("monoAt(now+1.5s) = %d, monoOf = %d", got, k.monoOf(later))
	}
	if back := k.time(k.monoOf(later)); back.Sub(later) != 0 || !back.Equal(later) {
		t.Errorf("time(monoOf(t)) = %v, want %v", back, later)
	}
	wall := later.Round(0) // no monotonic reading: Sub reads the wall clocks
	if got := monoAt(wall, nowM, now); got != nowM+mono(wall.Sub(now)) || got-nowM != mono(1500*time.Millisecond) {
		t.Errorf("monoAt(wall-only now+1.5s) = now + %v", time.Duration(got-nowM))
	}
	if got := monoAt(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), nowM, now); got != maxMono {
		t.Errorf("monoAt(year 9999) = %d, want maxMono", got)
	}
	if got := monoAt(time.Time{}, nowM, now); got >= nowM {
		t.Errorf("monoAt(zero time) = %d, want before now (%d)", got, nowM)
	}
}
