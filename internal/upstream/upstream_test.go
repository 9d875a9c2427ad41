package upstream_test

import (
	"testing"
	"time"

	"github.com/batcherhq/batcher/internal/upstream"
)

func TestLogLimiter(t *testing.T) {
	l := upstream.NewLogLimiter(time.Second)
	t0 := time.Unix(0, 0)
	if ok, n := l.Allow("a", t0); !ok || n != 0 {
		t.Fatal("first record held back")
	}
	for range 3 {
		if ok, _ := l.Allow("a", t0.Add(time.Millisecond)); ok {
			t.Fatal("repeat let through within the interval")
		}
	}
	if ok, _ := l.Allow("b", t0); !ok {
		t.Fatal("another key held back")
	}
	if ok, n := l.Allow("a", t0.Add(time.Second)); !ok || n != 3 {
		t.Fatalf("after the interval: %v, %d suppressed; want true, 3", ok, n)
	}
}
