package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// urgentLatencies times n URGENT requests, one after another. For each it
// also returns how many backend calls began between its submission and the
// call that carried it (calls counts the calls begun).
func urgentLatencies(t testing.TB, core *batcher.Batcher, n int, calls *callLog) (lat []time.Duration, overtaken []int) {
	t.Helper()
	lat = make([]time.Duration, 0, n)
	for i := range n {
		prompt := fmt.Sprint("urgent ", i)
		before := calls.begun()
		start := time.Now()
		_, err := core.Do(context.Background(), &batcher.Request{Route: "chat", Priority: batcher.PriorityUrgent,
			Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: prompt}}}})
		if err != nil {
			t.Fatalf("urgent request: %v", err)
		}
		lat = append(lat, time.Since(start))
		overtaken = append(overtaken, calls.carrier(prompt)-before-1)
	}
	slices.Sort(lat)
	return lat, overtaken
}

// callLog numbers a backend's calls and notes which call carried each
// URGENT prompt.
type callLog struct {
	mu    sync.Mutex
	n     int
	urged map[string]int
	next  batcher.Backend
	// at is closed when the atN-th call begins (reach).
	at  chan struct{}
	atN int
}

// reach returns a channel closed once n calls have begun.
func (l *callLog) reach(n int) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if l.n >= n {
		close(ch)
		return ch
	}
	l.at, l.atN = ch, n
	return ch
}

func (l *callLog) Dispatch(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	l.mu.Lock()
	l.n++
	if l.at != nil && l.n >= l.atN {
		close(l.at)
		l.at = nil
	}
	for _, r := range b.Requests {
		if m := r.Input.Messages; len(m) > 0 && strings.HasPrefix(m[0].Content, "urgent ") {
			l.urged[m[0].Content] = l.n
		}
	}
	l.mu.Unlock()
	return l.next.Dispatch(ctx, b, out)
}

func (l *callLog) begun() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *callLog) carrier(prompt string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.urged[prompt]
}

func pct(d []time.Duration, p float64) time.Duration { return d[min(len(d)-1, int(float64(len(d))*p))] }

// Online URGENT work is not queued behind a job that saturates the backend:
// the job's items go at DEFERRABLE priority, and the core holds a share of
// its capacity for URGENT and HIGH.
func TestUrgentLatencyWhileAJobRuns(t *testing.T) {
	p, err := sim.New(sim.Config{BaseLatency: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	calls := &callLog{urged: map[string]int{}, next: p}
	core, err := batcher.New(
		batcher.WithQueueCapacity(20_000),
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: calls, MaxConcurrency: 1}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim",
			Batch: batcher.BatchConfig{MaxBatchSize: 8, MinBatchSize: 1, Window: time.Millisecond, MaxWait: 50 * time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := started(t, jobs.Config{Store: openSQLite(t, dir), Core: core, DataDir: dir, Exclusive: true})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
		_ = core.Shutdown(ctx)
	}()
	const samples = 40
	idle, _ := urgentLatencies(t, core, samples, calls)

	c, err := m.Begin(t.Context(), jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5_000 {
		if err := c.Add(t.Context(), "", chatItem(fmt.Sprint("bulk ", i))); err != nil {
			t.Fatal(err)
		}
	}
	j, err := c.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the job keeps the backend busy: its window has opened
	// past a batch and the one slot is taken in turn by its batches. The
	// backend says when its 20th call since the idle samples begins;
	// Watch, when the job ends first.
	kept := calls.reach(calls.begun() + 20)
	watchCtx, stopWatch := context.WithCancel(t.Context())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = m.Watch(watchCtx, j.ID, time.Second, func(jobs.Progress) error { return nil })
	}()
	select {
	case <-kept:
	case <-ended:
		t.Fatal("the job ended before it kept the backend busy")
	}
	stopWatch()
	<-ended
	busy, overtaken := urgentLatencies(t, core, samples, calls)
	pg, _, _ := m.Progress(t.Context(), j.ID)
	t.Logf("URGENT p50/p99 idle %v/%v, while the job runs %v/%v (job: %d of %d done, %d in the core's queue)",
		pct(idle, 0.5), pct(idle, 0.99), pct(busy, 0.5), pct(busy, 0.99), pg.Counts.Ended(), pg.Counts.Total, core.Pending())
	if pg.Counts.Ended() == pg.Counts.Total {
		t.Fatal("the job ended before the busy samples: make it longer")
	}
	// What priority promises, independent of the machine's speed: an URGENT
	// request does not queue behind the job. Between its submission and the
	// call that carries it, at most the call in flight and one batch formed
	// for the slot may start — not the 100-odd items queued behind them.
	// (Latency is a benchmark's to measure: BENCHMARKS.md has the figures.)
	if worst := slices.Max(overtaken); worst > 2 {
		t.Fatalf("an URGENT request waited behind %d job calls (all: %v); want at most 2", worst, overtaken)
	}
	if _, err := m.Cancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
}
