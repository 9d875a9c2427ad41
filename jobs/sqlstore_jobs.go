package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

func (s *sqlStore) CreateJob(ctx context.Context, j *Job, maxActive int) error {
	spec, err := json.Marshal(&j.Spec)
	if err != nil {
		return fmt.Errorf("jobs: encoding the spec: %w", err)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if maxActive > 0 {
			if s.d.tenantLock != "" {
				if _, err := tx.ExecContext(ctx, s.q(s.d.tenantLock), "batcher.jobs.tenant:"+j.Tenant); err != nil {
					return err
				}
			}
			var n int
			if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM jobs WHERE tenant = ? AND state NOT IN (?, ?, ?, ?)`),
				j.Tenant, int(StateCompleted), int(StateFailed), int(StateCancelled), int(StateExpired)).Scan(&n); err != nil {
				return err
			}
			if n >= maxActive {
				return quotaError(j.Tenant, QuotaJobs, int64(maxActive))
			}
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO jobs (id, tenant, kind, spec, state, created_at) VALUES (?, ?, ?, ?, ?, ?)`),
			j.ID, j.Tenant, j.Spec.Kind, string(spec), int(j.State), j.CreatedAt.UnixNano())
		return err
	})
}

// delta is a change of a job's counts.
type delta struct {
	job       Counts
	groups    map[int]*Counts
	tokensIn  int64
	tokensOut int64
	invalid   int64
	cost      float64
	online    float64
}

func (d *delta) move(group int, from, to ItemState, n int64) {
	if d.groups == nil {
		d.groups = make(map[int]*Counts)
	}
	g := d.groups[group]
	if g == nil {
		g = &Counts{}
		d.groups[group] = g
	}
	if from != to {
		d.job.add(from, -n)
		g.add(from, -n)
	}
	d.job.add(to, n)
	g.add(to, n)
}

// apply writes d to the job's counters.
func (s *sqlStore) apply(ctx context.Context, tx *sql.Tx, jobID string, d *delta) error {
	c := &d.job
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET total = total + ?, pending = pending + ?, running = running + ?,
		succeeded = succeeded + ?, failed = failed + ?, cancelled = cancelled + ?, expired = expired + ?,
		tokens_in = tokens_in + ?, tokens_out = tokens_out + ?, invalid = invalid + ?,
		cost = cost + ?, online_cost = online_cost + ? WHERE id = ?`),
		c.Total, c.Pending, c.Running, c.Succeeded, c.Failed, c.Cancelled, c.Expired,
		d.tokensIn, d.tokensOut, d.invalid, d.cost, d.online, jobID); err != nil {
		return err
	}
	for g, c := range d.groups {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO job_groups (job_id, grp, total, pending, running, succeeded, failed, cancelled, expired)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job_id, grp) DO UPDATE SET total = job_groups.total + excluded.total,
			pending = job_groups.pending + excluded.pending, running = job_groups.running + excluded.running,
			succeeded = job_groups.succeeded + excluded.succeeded, failed = job_groups.failed + excluded.failed,
			cancelled = job_groups.cancelled + excluded.cancelled, expired = job_groups.expired + excluded.expired`),
			jobID, g, c.Total, c.Pending, c.Running, c.Succeeded, c.Failed, c.Cancelled, c.Expired); err != nil {
			return err
		}
	}
	return nil
}

func (s *sqlStore) AddTasks(ctx context.Context, jobID string, tasks []Task) error {
	if len(tasks) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		var d delta
		// Tasks that arrive ended (invalid inputs) are numbered now, so
		// that their error lines reach the output with the rest.
		ended := 0
		for i := range tasks {
			if tasks[i].State.Terminal() {
				ended++
			}
		}
		var next int64
		if ended > 0 {
			base, err := s.number(ctx, tx, jobID, ended)
			if err != nil {
				return err
			}
			next = base + 1
		}
		for len(tasks) > 0 {
			chunk := tasks[:min(len(tasks), maxInsertRows)]
			tasks = tasks[len(chunk):]
			var b strings.Builder
			b.WriteString(`INSERT INTO tasks (job_id, seq, item, grp, run, custom_id, line, state, request, result, done_seq) VALUES `)
			args := make([]any, 0, len(chunk)*11)
			for i := range chunk {
				t := &chunk[i]
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
				var done int64
				if t.State.Terminal() {
					done = next
					next++
				}
				args = append(args, jobID, t.Seq, t.Item, t.Group, t.Run, t.CustomID, t.Line, int(t.State), t.Request, t.Result, done)
				d.job.Total++
				d.move(t.Group, t.State, t.State, 1)
				d.groups[t.Group].Total++
				if t.State == ItemFailed && t.Group != GroupJudge {
					d.invalid++
				}
			}
			if _, err := tx.ExecContext(ctx, s.q(b.String()), args...); err != nil {
				return err
			}
		}
		return s.apply(ctx, tx, jobID, &d)
	})
}

func (s *sqlStore) Transition(ctx context.Context, id string, from []State, to State, errMsg string) error {
	now := time.Now().UnixNano()
	var b strings.Builder
	args := []any{int(to)}
	b.WriteString(`UPDATE jobs SET state = ?`)
	if errMsg != "" {
		b.WriteString(`, error = ?`)
		args = append(args, errMsg)
	}
	if to == StateRunning {
		b.WriteString(`, started_at = CASE WHEN started_at = 0 THEN ? ELSE started_at END`)
		args = append(args, now)
	}
	if to.Terminal() {
		b.WriteString(`, ended_at = ?`)
		args = append(args, now)
	}
	switch to {
	case StateCancelling:
		b.WriteString(`, cancelling_at = CASE WHEN cancelling_at = 0 THEN ? ELSE cancelling_at END`)
		args = append(args, now)
	case StateFinalizing:
		b.WriteString(`, finalizing_at = CASE WHEN finalizing_at = 0 THEN ? ELSE finalizing_at END`)
		args = append(args, now)
	}
	b.WriteString(` WHERE id = ? AND state IN (`)
	args = append(args, id)
	for i, f := range from {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
		args = append(args, int(f))
	}
	b.WriteByte(')')
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(b.String()), args...)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 || !to.Terminal() {
			return err
		}
		// An ended job needs no lease: its holders' rows go.
		_, err = tx.ExecContext(ctx, s.q(`DELETE FROM leases WHERE job_id = ?`), id)
		return err
	})
	// The planner's statistics change with the tasks' states: refreshed
	// when a job is queued (its tasks all pending) and when it ends (all
	// ended), so that neither claims nor result listings depend on
	// autovacuum having caught up. Listing a 100k job's results after
	// stale statistics took 25-47 s on PostgreSQL instead of about 1 s
	// (BenchmarkListResults).
	if err == nil && n > 0 && (to == StateQueued || to.Terminal()) && s.d.analyze != "" {
		if _, err := s.db.ExecContext(ctx, s.d.analyze); err != nil {
			return fmt.Errorf("jobs: refreshing the planner's statistics: %w", err)
		}
	}
	if err != nil || n > 0 {
		return err
	}
	if _, err := s.GetJob(ctx, id); err != nil {
		return err
	}
	return ErrConflict
}

const jobColumns = `id, tenant, kind, spec, state, total, pending, running, succeeded, failed, cancelled, expired, invalid,
	tokens_in, tokens_out, created_at, started_at, ended_at, error, cancelling_at, finalizing_at, cost, online_cost`

func scanJob(row interface{ Scan(...any) error }) (*Job, error) {
	var (
		j                       Job
		spec                    string
		state                   int
		created, started, ended int64
		cancelling, finalizing  int64
	)
	c := &j.Counts
	if err := row.Scan(&j.ID, &j.Tenant, &j.Spec.Kind, &spec, &state, &c.Total, &c.Pending, &c.Running, &c.Succeeded, &c.Failed, &c.Cancelled, &c.Expired,
		&j.Invalid, &j.TokensIn, &j.TokensOut, &created, &started, &ended, &j.Error, &cancelling, &finalizing, &j.Cost, &j.OnlineCost); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(spec), &j.Spec); err != nil {
		return nil, fmt.Errorf("jobs: job %s: decoding its spec: %w", j.ID, err)
	}
	j.State = State(state)
	j.CreatedAt = time.Unix(0, created)
	if started != 0 {
		j.StartedAt = time.Unix(0, started)
	}
	if ended != 0 {
		j.EndedAt = time.Unix(0, ended)
	}
	if cancelling != 0 {
		j.CancellingAt = time.Unix(0, cancelling)
	}
	if finalizing != 0 {
		j.FinalizingAt = time.Unix(0, finalizing)
	}
	return &j, nil
}

func (s *sqlStore) GetJob(ctx context.Context, id string) (*Job, error) {
	j, err := scanJob(s.db.QueryRowContext(ctx, s.q(`SELECT `+jobColumns+` FROM jobs WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT grp, total, pending, running, succeeded, failed, cancelled, expired
		FROM job_groups WHERE job_id = ?`), id)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	j.Groups = make(map[int]Counts)
	for rows.Next() {
		var g int
		var c Counts
		if err := rows.Scan(&g, &c.Total, &c.Pending, &c.Running, &c.Succeeded, &c.Failed, &c.Cancelled, &c.Expired); err != nil {
			return nil, err
		}
		j.Groups[g] = c
	}
	return j, rows.Err()
}

func (s *sqlStore) ListJobs(ctx context.Context, tenant string, q ListQuery) ([]*Job, error) {
	var b strings.Builder
	var args []any
	b.WriteString(`SELECT ` + jobColumns + ` FROM jobs WHERE 1 = 1`)
	if tenant != "" {
		b.WriteString(` AND tenant = ?`)
		args = append(args, tenant)
	}
	if q.Kind != "" {
		b.WriteString(` AND kind = ?`)
		args = append(args, q.Kind)
	}
	if q.State != StateUnspecified {
		b.WriteString(` AND state = ?`)
		args = append(args, int(q.State))
	}
	if q.After != "" {
		var created int64
		err := s.db.QueryRowContext(ctx, s.q(`SELECT created_at FROM jobs WHERE id = ? AND (tenant = ? OR ? = '') AND (kind = ? OR ? = '')`),
			q.After, tenant, tenant, q.Kind, q.Kind).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, kindErr(ErrInvalid, "page token names no job")
		}
		if err != nil {
			return nil, err
		}
		b.WriteString(` AND (created_at < ? OR (created_at = ? AND id < ?))`)
		args = append(args, created, created, q.After)
	}
	b.WriteString(` ORDER BY created_at DESC, id DESC LIMIT ?`)
	args = append(args, q.Limit)
	rows, err := s.db.QueryContext(ctx, s.q(b.String()), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []*Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

func (s *sqlStore) DeleteJob(ctx context.Context, id string) error {
	s.mu.Lock()
	delete(s.from, id)
	delete(s.rescanned, id)
	s.mu.Unlock()
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM jobs WHERE id = ?`), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM job_groups WHERE job_id = ?`), id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM upstream_batches WHERE job_id = ?`), id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM leases WHERE job_id = ?`), id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.q(`DELETE FROM tasks WHERE job_id = ?`), id)
		return err
	})
}
