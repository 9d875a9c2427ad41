package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Get returns a job. Every method that names a job answers ErrNotFound,
// as for an unknown id, when ctx's tenant (WithTenant) is not the job's.
func (m *Manager) Get(ctx context.Context, id string) (*Job, error) {
	j, err := m.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return nil, err
	}
	return visible(ctx, j)
}

// List returns a page of jobs that match q, newest first: ctx's
// tenant's only.
func (m *Manager) List(ctx context.Context, q ListQuery) ([]*Job, error) {
	t, _ := tenantOf(ctx)
	return m.cfg.Store.ListJobs(ctx, t.Name, q)
}

// Progress returns a job's progress.
func (m *Manager) Progress(ctx context.Context, id string) (Progress, *Job, error) {
	j, err := m.Get(ctx, id)
	if err != nil {
		return Progress{}, nil, err
	}
	p := m.ProgressOf(j)
	if j.Spec.Dispatch == DispatchBatchAPI || j.Spec.Dispatch == DispatchAuto {
		if cs, ok := m.cfg.Store.(ChunkStore); ok {
			chunks, err := cs.Chunks(ctx, id)
			if err != nil {
				return Progress{}, nil, err
			}
			if p.Upstream = upstreamProgress(chunks, p.Time); p.Upstream != nil && !j.State.Terminal() {
				if e := p.Upstream.ETA; e >= 0 && (p.ETA < 0 || e > p.ETA) {
					p.ETA = e // the job cannot end before its upstream batches do
				}
			}
		}
	}
	return p, j, nil
}

// ProgressOf returns the progress of a job read from the store (Get,
// List): its rates and ETA as GetJob reports them, over the same moving
// window.
func (m *Manager) ProgressOf(j *Job) Progress {
	return progressOf(j, m.tracker(j.ID), time.Now())
}

// Watch calls f with the job's progress at most once every interval (0: a
// second) and on every change of state, until the job is terminal (after
// reporting it), ctx ends or f fails.
func (m *Manager) Watch(ctx context.Context, id string, interval time.Duration, f func(Progress) error) error {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ch := m.changes(id)
		p, _, err := m.Progress(ctx, id)
		if err != nil {
			return err
		}
		if err := f(p); err != nil {
			return err
		}
		if p.State.Terminal() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-ch:
		}
	}
}

// Cancel asks a job to end: queued tasks end cancelled, those in flight may
// finish, and the job ends CANCELLED. A job that has already ended is
// returned as it is.
func (m *Manager) Cancel(ctx context.Context, id string) (*Job, error) {
	j, err := m.CancelUnended(ctx, id)
	if errors.Is(err, ErrEnded) {
		return m.cfg.Store.GetJob(ctx, id)
	}
	return j, err
}

// CancelUnended is Cancel for a caller that must know whether the cancel
// took: a job that has already ended is an ErrEnded (an *EndedError,
// which names the state it ended in). The store's
// conditional update decides, so a job that ends while the call runs is
// either cancelled or ErrEnded, never answered as cancelled when it
// ended otherwise. A job already cancelling is returned as it is.
func (m *Manager) CancelUnended(ctx context.Context, id string) (*Job, error) {
	if _, err := m.Get(ctx, id); err != nil {
		return nil, err
	}
	err := m.cfg.Store.Transition(ctx, id, []State{StateValidating, StateQueued, StateRunning}, StateCancelling, "")
	if err != nil && !errors.Is(err, ErrConflict) {
		return nil, err
	}
	m.mu.Lock()
	r := m.runs[id]
	m.mu.Unlock()
	if r != nil {
		if err == nil {
			r.cancelWork() // a claim in progress stops now
		}
		r.poke()
	}
	m.notify(id)
	m.nudge()
	j, gerr := m.cfg.Store.GetJob(ctx, id)
	if gerr != nil {
		return nil, gerr
	}
	// A state leaves the three above only for finalizing, cancelling or
	// an end, and an end is final: a conflict with the job ended now is
	// a job that had ended, or was finishing and has.
	if err != nil && j.State.Terminal() {
		return nil, &EndedError{ID: id, State: j.State}
	}
	return j, nil
}

// Delete removes a job's rows and files, cancelling it first if it runs
// here.
func (m *Manager) Delete(ctx context.Context, id string) error {
	j, err := m.Get(ctx, id)
	if err != nil {
		return err
	}
	m.mu.Lock()
	r := m.runs[id]
	m.mu.Unlock()
	if r != nil {
		r.abort()
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := m.cfg.Store.DeleteJob(ctx, id); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.trackers, id)
	m.mu.Unlock()
	m.notify(id)
	if err := m.removeOutput(j); err != nil {
		return fmt.Errorf("jobs: removing the files of %s: %w", id, err)
	}
	return nil
}

// Results returns up to n ended tasks of a job after seq after, in item
// order, only those in state when it is terminal.
func (m *Manager) Results(ctx context.Context, id string, after int64, state ItemState, n int) ([]Task, error) {
	if _, ok := tenantOf(ctx); ok {
		if _, err := m.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	return m.cfg.Store.Results(ctx, id, after, state, n)
}
