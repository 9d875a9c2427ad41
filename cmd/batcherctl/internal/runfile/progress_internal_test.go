package runfile

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The ETA counts completions, not results written in input order: with
// one slow request at the head nothing is written, yet 90 of 100 are
// answered after 9 s, so about 1 s is left, not "unknown" or hours.
func TestETACountsCompletions(t *testing.T) {
	c := new(Counters)
	c.Total.Store(100)
	c.Answered.Store(85)
	c.Local.Store(5) // unreadable lines: their results are known at once
	start := time.Now().Add(-9 * time.Second)
	eta, ok := c.eta(start)
	if !ok || eta < 900*time.Millisecond || eta > 1100*time.Millisecond {
		t.Fatalf("eta = %v, %v; want about 1s", eta, ok)
	}
	var b bytes.Buffer
	p := NewPlain(&b, "run:", 0)
	p.Start(c)
	p.start = start
	p.line("")
	if !strings.Contains(b.String(), "ETA 1s") {
		t.Fatalf("plain line %q, want ETA 1s", b.String())
	}
	p.Stop(false)
	c.Done.Store(100) // all written: nothing left
	if _, ok := c.eta(start); ok {
		t.Fatal("an ETA for a finished run")
	}
}

// A notice goes above the bar on a line of its own, cleared of what the
// terminal echoed (^C).
func TestBarNotice(t *testing.T) {
	var b bytes.Buffer
	bar := NewBar(&b, "in")
	bar.Notice("before the bar")
	c := new(Counters)
	c.Total.Store(10)
	bar.Start(c)
	bar.Notice("draining; press Ctrl-C again to abort")
	bar.Stop(false)
	bar.Notice("after the bar")
	s := b.String()
	for _, want := range []string{"\r\x1b[Kbefore the bar\n", "\r\x1b[Kdraining; press Ctrl-C again to abort\n", "\r\x1b[Kafter the bar\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%q", want, s)
		}
	}
}
