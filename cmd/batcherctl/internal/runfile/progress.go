package runfile

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Counters are a run's live counts. Run updates them from its writer as
// result lines are written; a Progress reads them at any time.
type Counters struct {
	// Total is the estimated number of requests the run will write, 0 when
	// unknown (input from a pipe). Run sets it before Start.
	Total atomic.Int64
	// Sent counts the requests taken from the input and sent (or known to
	// be bad); Sent-Done are in flight.
	Sent atomic.Int64
	// Done counts result lines written, failures included.
	Done atomic.Int64
	// Failed counts error lines written.
	Failed atomic.Int64
	// Tokens counts the total tokens (prompt and completion) of the
	// completions written.
	Tokens atomic.Int64
	// Answered counts the requests the service answered, in whatever order
	// (from its stream summaries, about once a second); Local counts the
	// lines that needed no answer (unreadable ones). Their sum, not Done
	// (which waits for input order), drives the ETA: one slow request at
	// the head holds Done back while the rest complete.
	Answered atomic.Int64
	Local    atomic.Int64
}

// completed is how many requests have their result, written or not.
func (c *Counters) completed() int64 {
	return max(c.Done.Load(), c.Answered.Load()+c.Local.Load())
}

// eta is the time left at the rate of completions since start; ok is false
// while unknown.
func (c *Counters) eta(start time.Time) (time.Duration, bool) {
	done, total := c.completed(), c.Total.Load()
	rate := perSecond(done, time.Since(start))
	if total <= done || rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(total-done) / rate * float64(time.Second)), true
}

// Progress shows a run's progress. Run calls Start once when the run
// begins and Stop once when it is over, from the same goroutine.
type Progress interface {
	Start(c *Counters)
	// Stop draws the final state and returns when it is drawn. complete
	// says whether the run went through its whole input.
	Stop(complete bool)
	// Notice prints a line for people (such as "draining") without
	// garbling the progress: above a bar, or as a line of its own. It may
	// be called from any goroutine between Start and Stop.
	Notice(msg string)
}

// refreshInterval is how often a bar takes the counters.
const refreshInterval = 100 * time.Millisecond

// Bar draws a live progress bar (vbauerster/mpb) on a terminal: done of
// total with the percentage, failures, the average rate, tokens per second,
// and the ETA. Use it only when w is a terminal; see Plain otherwise.
type Bar struct {
	w     io.Writer
	label string

	p     *mpb.Progress
	bar   *mpb.Bar
	stop  chan struct{}
	ended sync.WaitGroup
	// mu guards drawing, so that Notice, from any goroutine, sees the
	// bar started or not.
	mu      sync.Mutex
	drawing bool
}

// NewBar returns a Bar that draws on w, its line starting with label.
func NewBar(w io.Writer, label string) *Bar { return &Bar{w: w, label: label} }

// Start implements Progress.
func (b *Bar) Start(c *Counters) {
	start := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drawing = true
	// Refreshed on any writer: --progress bar asks for the bar wherever
	// stderr goes, and a Notice is flushed at a refresh.
	b.p = mpb.New(mpb.WithOutput(b.w), mpb.WithWidth(100), mpb.WithRefreshRate(refreshInterval), mpb.WithAutoRefresh())
	b.bar = b.p.New(c.Total.Load(), mpb.BarStyle(),
		mpb.PrependDecorators(
			decor.Name(b.label, decor.WCSyncSpaceR),
			decor.CountersNoUnit("%d/%d", decor.WCSyncWidth),
			decor.Any(func(decor.Statistics) string { return fmt.Sprintf(" %d failed", c.Failed.Load()) }),
		),
		mpb.AppendDecorators(
			decor.Percentage(decor.WCSyncWidth),
			decor.Name(" "),
			// Both rates are computed at every draw: mpb's NewAverageSpeed
			// keeps its last figure from before completion, so a run over
			// before the first refresh drew no req/s at all.
			decor.Any(func(s decor.Statistics) string {
				el := time.Since(start)
				return fmt.Sprintf("%.0f req/s %.0f tok/s", perSecond(s.Current, el), perSecond(c.Tokens.Load(), el))
			}),
			decor.Name(" "),
			decor.OnComplete(decor.Any(func(decor.Statistics) string {
				if d, ok := c.eta(start); ok {
					return "ETA " + d.Round(time.Second).String()
				}
				return "ETA -"
			}), "done"),
		),
	)
	b.stop = make(chan struct{})
	b.ended.Add(1)
	go func() {
		defer b.ended.Done()
		t := time.NewTicker(refreshInterval)
		defer t.Stop()
		total := c.Total.Load()
		for {
			select {
			case <-b.stop:
				b.bar.SetCurrent(c.Done.Load())
				return
			case <-t.C:
			}
			if n := c.Total.Load(); n != total {
				total = n
				b.bar.SetTotal(n, false)
			}
			b.bar.SetCurrent(c.Done.Load())
		}
	}()
}

// Notice implements Progress: the line goes above the bar. It starts on a
// fresh line, after the "^C" a terminal echoes.
func (b *Bar) Notice(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	line := "\r\x1b[K" + msg + "\n"
	if b.drawing {
		if _, err := io.WriteString(b.p, line); err == nil {
			return
		}
	}
	_, _ = io.WriteString(b.w, line) // no bar drawn (yet, or any more)
}

// Stop implements Progress. A complete run's bar ends at 100%; an
// interrupted one's stays where it stopped.
func (b *Bar) Stop(complete bool) {
	b.mu.Lock()
	b.drawing = false
	b.mu.Unlock()
	close(b.stop)
	b.ended.Wait()
	if complete {
		b.bar.SetTotal(-1, true) // the total becomes what was done: 100%
	} else {
		b.bar.Abort(false)
	}
	b.p.Wait()
}

// Plain prints a progress line every interval and a last one at Stop, for
// output that is not a terminal (a log, a CI job):
//
//	batcherctl run: 1200/100000 (1.2%) done, 3 failed, 450 req/s, 12000 tok/s, ETA 3m40s
type Plain struct {
	w        io.Writer
	label    string
	interval time.Duration

	c     *Counters
	start time.Time
	stop  chan struct{}
	ended sync.WaitGroup
	mu    sync.Mutex // one line at a time on w
}

// NewPlain returns a Plain that writes to w every interval (none but the
// last when interval is 0), each line starting with label.
func NewPlain(w io.Writer, label string, interval time.Duration) *Plain {
	return &Plain{w: w, label: label, interval: interval}
}

// Start implements Progress.
func (p *Plain) Start(c *Counters) {
	p.c, p.start, p.stop = c, time.Now(), make(chan struct{})
	if p.interval <= 0 {
		return
	}
	p.ended.Add(1)
	go func() {
		defer p.ended.Done()
		t := time.NewTicker(p.interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.line("")
			}
		}
	}()
}

// Notice implements Progress: a line of its own.
func (p *Plain) Notice(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintln(p.w, msg)
}

// Stop implements Progress.
func (p *Plain) Stop(complete bool) {
	close(p.stop)
	p.ended.Wait()
	if complete {
		p.line("finished")
	} else {
		p.line("stopped")
	}
}

func (p *Plain) line(end string) {
	el := time.Since(p.start)
	done := p.c.Done.Load()
	s := fmt.Sprintf("%s %d", p.label, done)
	total := p.c.Total.Load()
	if end == "finished" {
		total = done
	}
	if total > 0 {
		s += fmt.Sprintf("/%d (%.1f%%)", total, 100*float64(done)/float64(total))
	}
	rate := perSecond(done, el)
	s += fmt.Sprintf(" done, %d failed, %.0f req/s, %.0f tok/s", p.c.Failed.Load(), rate, perSecond(p.c.Tokens.Load(), el))
	if end != "" {
		s += ", " + end + " in " + el.Round(time.Millisecond).String()
	} else if eta, ok := p.c.eta(p.start); ok {
		s += ", ETA " + eta.Round(time.Second).String()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintln(p.w, s)
}

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
