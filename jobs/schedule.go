package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// Start resumes the jobs the store holds and starts looking for work. With
// Exclusive, claims a previous run of this process left go back first.
func (m *Manager) Start(ctx context.Context) error {
	if err := os.MkdirAll(m.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("jobs: data directory %s: %w", m.cfg.DataDir, err)
	}
	if m.cfg.Exclusive {
		n, err := m.cfg.Store.Release(ctx, "", time.Now().Add(100*365*24*time.Hour))
		if err != nil {
			return fmt.Errorf("jobs: returning the previous run's claims: %w", err)
		}
		if n > 0 {
			m.cfg.Logger.Info("jobs: resumed claims left by the previous run", "tasks", n)
		}
		// A job still VALIDATING was being created when the process died:
		// its caller got no answer, so it is dropped.
		orphans, err := m.cfg.Store.ListJobs(ctx, "", ListQuery{State: StateValidating, Limit: 1000})
		if err != nil {
			return fmt.Errorf("jobs: looking for jobs left half-created: %w", err)
		}
		for _, j := range orphans {
			if err := m.cfg.Store.DeleteJob(ctx, j.ID); err != nil && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("jobs: removing the half-created job %s: %w", j.ID, err)
			}
		}
	} else {
		if lv, ok := m.cfg.Store.(Liveness); ok {
			// Alive from now on; the claims of owners that are not (this
			// process's previous life, a crashed replica) go back at once,
			// not when their leases end.
			if err := lv.Live(ctx, m.cfg.Owner); err != nil {
				return err
			}
			m.releaseDead(ctx)
		}
		if err := m.dropAbandoned(ctx); err != nil {
			return err
		}
	}
	go m.loop()
	return nil
}

// releaseDead returns the claims of dead owners to pending, on a store
// that knows who is alive (Liveness).
func (m *Manager) releaseDead(ctx context.Context) {
	lv, ok := m.cfg.Store.(Liveness)
	if !ok || m.cfg.Exclusive {
		return
	}
	n, err := lv.ReleaseDead(ctx, m.cfg.Owner)
	if err != nil && ctx.Err() == nil {
		m.cfg.Logger.Error("jobs: taking over the claims of dead owners", "err", err)
	}
	if n > 0 {
		m.cfg.Logger.Info("jobs: took over the claims of a process that died", "tasks", n)
		m.nudge()
	}
}

// dropAbandoned removes the jobs left VALIDATING by a creator that died:
// those no process holds (Store.Hold) and created over a lease ago. On a
// shared store the creator may be another process, alive: its lease tells.
func (m *Manager) dropAbandoned(ctx context.Context) error {
	ids, err := m.cfg.Store.Abandoned(ctx, time.Now().Add(-m.cfg.Lease), 1000)
	if err != nil {
		return fmt.Errorf("jobs: looking for jobs left half-created: %w", err)
	}
	for _, id := range ids {
		if err := m.cfg.Store.DeleteJob(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("jobs: removing the half-created job %s: %w", id, err)
		}
		m.cfg.Logger.Info("jobs: removed a job its creator left half-created", "job", id)
	}
	return nil
}

// Shutdown stops claiming, lets in-flight tasks finish and be recorded
// until ctx ends, and returns the remaining claims to pending. Run it before
// the core's shutdown, so that in-flight tasks can finish.
//
// When ctx ends first, the runs return at once: their requests in flight
// are cancelled and their store calls abandoned (within 5s more), and
// what they did not record runs again at the next start.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.stopOnce.Do(func() {
		close(m.stop)
		m.stopWork()
	})
	done := make(chan struct{})
	go func() {
		<-m.loopDone
		m.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("jobs: drain ended with tasks in flight (they run again at restart): %w", ctx.Err())
		m.killRuns()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		select {
		case <-done:
		case <-wctx.Done():
			err = errors.Join(err, errors.New("jobs: a run did not return within 5s of the drain's end"))
		}
		cancel()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, rerr := m.cfg.Store.Release(rctx, m.cfg.Owner, time.Now()); rerr != nil {
		err = errors.Join(err, fmt.Errorf("jobs: returning claims: %w", rerr))
	}
	return err
}

func (m *Manager) nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// notify wakes the watchers of a job.
func (m *Manager) notify(id string) {
	m.mu.Lock()
	if ch := m.changed[id]; ch != nil {
		close(ch)
		delete(m.changed, id)
	}
	m.mu.Unlock()
}

func (m *Manager) changes(id string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.changed[id]
	if ch == nil {
		ch = make(chan struct{})
		m.changed[id] = ch
	}
	return ch
}

func (m *Manager) tracker(id string) *rateTracker {
	m.mu.Lock()
	defer m.mu.Unlock()
	tr := m.trackers[id]
	if tr == nil {
		tr = &rateTracker{window: DefaultRateWindow}
		m.trackers[id] = tr
	}
	return tr
}

// loop looks for jobs to run, renews leases, takes over expired ones and
// removes ended jobs past their TTL.
func (m *Manager) loop() {
	defer close(m.loopDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.stop
		cancel()
	}()
	poll := time.NewTicker(m.cfg.PollInterval)
	defer poll.Stop()
	lease := time.NewTicker(m.cfg.Lease / 3)
	defer lease.Stop()
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	m.schedule(ctx)
	for {
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-poll.C:
			m.releaseDead(ctx)
		case <-lease.C:
			if err := m.cfg.Store.Extend(ctx, m.cfg.Owner, m.cfg.Lease); err != nil && ctx.Err() == nil {
				m.cfg.Logger.Error("jobs: renewing leases", "err", err)
			}
			if !m.cfg.Exclusive {
				if n, err := m.cfg.Store.Release(ctx, "", time.Now()); err != nil && ctx.Err() == nil {
					m.cfg.Logger.Error("jobs: taking over expired leases", "err", err)
				} else if n > 0 {
					m.cfg.Logger.Info("jobs: took over tasks whose lease ended", "tasks", n)
				}
			}
			continue
		case <-sweep.C:
			m.sweep(ctx)
			continue
		}
		m.schedule(ctx)
	}
}

// schedule starts runs for the jobs that need one here.
func (m *Manager) schedule(ctx context.Context) {
	for _, st := range []State{StateCancelling, StateFinalizing, StateRunning, StateQueued} {
		js, err := m.cfg.Store.ListJobs(ctx, "", ListQuery{State: st, Limit: 100})
		if err != nil {
			if ctx.Err() == nil {
				m.cfg.Logger.Error("jobs: looking for work", "err", err)
			}
			return
		}
		// Oldest first.
		for i := len(js) - 1; i >= 0; i-- {
			j := js[i]
			m.mu.Lock()
			_, running := m.runs[j.ID]
			busy := len(m.runs) >= m.cfg.MaxRunning && (st == StateRunning || st == StateQueued)
			if running || busy {
				m.mu.Unlock()
				continue
			}
			select {
			case <-m.stop:
				m.mu.Unlock()
				return
			default:
			}
			r := newRun(m, j)
			m.runs[j.ID] = r
			m.wg.Add(1)
			m.mu.Unlock()
			go r.loop()
		}
	}
}

// share returns the in-flight bound of one of the running jobs.
func (m *Manager) share() int {
	m.mu.Lock()
	n := max(len(m.runs), 1)
	m.mu.Unlock()
	return max(m.cfg.MaxInFlight/n, 1)
}

func (m *Manager) removeRun(id string) {
	m.mu.Lock()
	delete(m.runs, id)
	m.mu.Unlock()
	m.wg.Done()
	m.nudge()
}

func (m *Manager) sweep(ctx context.Context) {
	if !m.cfg.Exclusive {
		if err := m.dropAbandoned(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Error("jobs: sweeping", "err", err)
		}
	}
	if m.cfg.TTL < 0 {
		return
	}
	for _, st := range []State{StateCompleted, StateFailed, StateCancelled, StateExpired} {
		js, err := m.cfg.Store.ListJobs(ctx, "", ListQuery{State: st, Limit: 1000})
		if err != nil {
			return
		}
		for _, j := range js {
			if !j.EndedAt.IsZero() && time.Since(j.EndedAt) > m.cfg.TTL {
				if err := m.Delete(ctx, j.ID); err != nil && ctx.Err() == nil {
					m.cfg.Logger.Error("jobs: removing an expired job", "job", j.ID, "err", err)
				}
			}
		}
	}
}
