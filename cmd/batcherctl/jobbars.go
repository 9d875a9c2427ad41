package main

import (
	"io"
	"sync/atomic"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// jobBars draws one mpb bar per run group of a watched job (one for the
// whole job when it has no groups), on a terminal.
type jobBars struct {
	p     *mpb.Progress
	bars  map[string]*mpb.Bar
	state atomic.Pointer[string] // read by mpb's goroutine
	rate  atomic.Pointer[string] // the job's rate, tokens/s and ETA; read by mpb's goroutine
}

func newJobBars(w io.Writer) *jobBars {
	return &jobBars{p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(100)), bars: map[string]*mpb.Bar{}}
}

func (b *jobBars) update(p *batcherv1.JobProgress) {
	type row struct {
		name string
		c    *batcherv1.JobCounts
	}
	rows := []row{{"job", p.GetCounts()}}
	if gs := p.GetGroups(); len(gs) > 0 {
		rows = rows[:0]
		for _, g := range gs {
			rows = append(rows, row{g.GetGroup(), g.GetCounts()})
		}
	}
	state := stateName(p.GetState())
	b.state.Store(&state)
	rate := rateText(p)
	b.rate.Store(&rate)
	for _, r := range rows {
		bar, ok := b.bars[r.name]
		if !ok {
			c := r.c
			bar = b.p.New(c.GetTotal(), mpb.BarStyle(),
				mpb.PrependDecorators(decor.Name(r.name, decor.WCSyncSpaceR), decor.CountersNoUnit("%d/%d", decor.WCSyncWidth)),
				mpb.AppendDecorators(decor.Percentage(decor.WCSyncWidth), decor.Any(func(decor.Statistics) string {
					return " " + *b.state.Load() + " " + *b.rate.Load()
				})))
			b.bars[r.name] = bar
		}
		ended := r.c.GetSucceeded() + r.c.GetFailed() + r.c.GetCancelled() + r.c.GetExpired()
		bar.SetTotal(r.c.GetTotal(), false)
		bar.SetCurrent(ended)
		if p.GetState() == batcherv1.JobState_JOB_STATE_COMPLETED || p.GetState() == batcherv1.JobState_JOB_STATE_FAILED ||
			p.GetState() == batcherv1.JobState_JOB_STATE_CANCELLED || p.GetState() == batcherv1.JobState_JOB_STATE_EXPIRED {
			bar.SetTotal(-1, true) // complete the bar even when items were cancelled
		}
	}
}

// wait ends the drawing; call it once the watch returned.
func (b *jobBars) wait() {
	for _, bar := range b.bars {
		if !bar.Completed() {
			bar.Abort(false)
		}
	}
	b.p.Wait()

}
