package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sqlStore is the Store over database/sql that both the SQLite and the
// PostgreSQL stores are: one set of queries, written with ? placeholders,
// and a dialect for what differs (placeholders, SKIP LOCKED, how many rows
// one statement may complete, whether writes must queue in the process).
type sqlStore struct {
	db *sql.DB
	d  dialect

	mu      sync.Mutex
	queries map[string]string // rebound queries, by their ? form
	// from holds, per job, a Seq below which no task of the job is
	// pending, as far as this process knows: a claim scans from there
	// instead of walking every finished task from the start (on
	// PostgreSQL, whose statistics lag a running job, the planner scans
	// the primary key and filters). Guarded by mu.
	from map[string]int64
	// rescanned holds, per job, when a short claim last sent the next
	// one back to the start. Guarded by mu.
	rescanned map[string]time.Time
}

// rescanEvery bounds how often a short claim sends the job's next claim
// back to the start: at a job's tail every claim is short, and a scan from
// the start walks every finished task (and, on PostgreSQL, the dead index
// entries they left behind).
const rescanEvery = time.Second

// shortClaim notes a claim that found fewer tasks than asked from the
// hint: tasks may have gone back below it (another process's lease ended),
// so the next claim looks from the start, unless one did within
// rescanEvery.
func (s *sqlStore) shortClaim(jobID string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.rescanned[jobID]) < rescanEvery {
		return
	}
	if s.rescanned == nil {
		s.rescanned = make(map[string]time.Time)
	}
	s.rescanned[jobID] = now
	if _, ok := s.from[jobID]; ok {
		s.from[jobID] = 0
	}
}

// claimFrom returns the Seq a claim of the job may start from.
func (s *sqlStore) claimFrom(jobID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.from[jobID]
}

// lowerFrom notes that the job may have a pending task at seq (-1: anywhere).
func (s *sqlStore) lowerFrom(jobID string, seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.from[jobID]; ok && (seq < 0 || seq < cur) {
		if seq < 0 {
			seq = 0
		}
		s.from[jobID] = seq
	}
}

// raiseFrom notes that the job has no pending task below seq.
func (s *sqlStore) raiseFrom(jobID string, seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.from == nil {
		s.from = make(map[string]int64)
	}
	s.from[jobID] = max(s.from[jobID], seq)
}

type dialect struct {
	// dollar: placeholders are $1, $2, ...
	dollar bool
	// skipLocked ends a claim's row selection.
	skipLocked string
	// writeMu, when set, runs write transactions one at a time (SQLite
	// allows one writer; queuing in the process spares busy retries).
	writeMu *sync.Mutex
	// analyze, when set, refreshes the planner's statistics once a job's
	// tasks are loaded: without it PostgreSQL plans claims on a freshly
	// loaded table as if it were empty (a bitmap scan and a sort of every
	// pending task, instead of an index scan that stops at the chunk).
	analyze string
	// tenantLock, when set, is a statement taking a transaction lock on
	// its one argument (a tenant's key), so that counting a tenant's jobs
	// and inserting one is atomic between processes. SQLite needs none:
	// its writes are serialized.
	tenantLock string
	// retryable reports an error after which a transaction may simply run
	// again (a deadlock victim).
	retryable func(error) bool
	// completeRows sets the ends of outs (done numbers from base+1) on the
	// rows that match cond, and reports which matched.
	completeRows func(ctx context.Context, s *sqlStore, tx *sql.Tx, jobID string, outs []Outcome, base int64, cond string, condArgs []any) ([]bool, error)
}

// maxInsertRows bounds the rows of one INSERT: 9 values a row stays far
// below both databases' placeholder limits.
const maxInsertRows = 500

// q returns query with the dialect's placeholders.
func (s *sqlStore) q(query string) string {
	if !s.d.dollar {
		return query
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.queries[query]; ok {
		return r
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	r := b.String()
	if len(s.queries) < 1000 { // only fixed queries are worth keeping
		s.queries[query] = r
	}
	return r
}

// write runs f in a write transaction, again (up to maxTxTries times) when
// the database aborted it as a deadlock victim or a serialization failure.
func (s *sqlStore) write(ctx context.Context, f func(tx *sql.Tx) error) error {
	if s.d.writeMu != nil {
		s.d.writeMu.Lock()
		defer s.d.writeMu.Unlock()
	}
	var err error
	for range maxTxTries {
		if err = s.tryWrite(ctx, f); err == nil || s.d.retryable == nil || !s.d.retryable(err) {
			return err
		}
	}
	return err
}

// maxTxTries bounds how often write runs a transaction the database aborted.
const maxTxTries = 5

func (s *sqlStore) tryWrite(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (s *sqlStore) Close() error { return s.db.Close() }

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
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO jobs (id, tenant, spec, state, created_at) VALUES (?, ?, ?, ?, ?)`),
			j.ID, j.Tenant, string(spec), int(j.State), j.CreatedAt.UnixNano())
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

const jobColumns = `id, tenant, spec, state, total, pending, running, succeeded, failed, cancelled, expired, invalid,
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
	if err := row.Scan(&j.ID, &j.Tenant, &spec, &state, &c.Total, &c.Pending, &c.Running, &c.Succeeded, &c.Failed, &c.Cancelled, &c.Expired,
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

func (s *sqlStore) ListJobs(ctx context.Context, tenant string, state State, after string, limit int) ([]*Job, error) {
	var b strings.Builder
	var args []any
	b.WriteString(`SELECT ` + jobColumns + ` FROM jobs WHERE 1 = 1`)
	if tenant != "" {
		b.WriteString(` AND tenant = ?`)
		args = append(args, tenant)
	}
	if state != StateUnspecified {
		b.WriteString(` AND state = ?`)
		args = append(args, int(state))
	}
	if after != "" {
		var created int64
		err := s.db.QueryRowContext(ctx, s.q(`SELECT created_at FROM jobs WHERE id = ? AND (tenant = ? OR ? = '')`),
			after, tenant, tenant).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%w: page token names no job", ErrInvalid)
		}
		if err != nil {
			return nil, err
		}
		b.WriteString(` AND (created_at < ? OR (created_at = ? AND id < ?))`)
		args = append(args, created, created, after)
	}
	b.WriteString(` ORDER BY created_at DESC, id DESC LIMIT ?`)
	args = append(args, limit)
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

func (s *sqlStore) Claim(ctx context.Context, jobID, owner string, n int, lease time.Duration) ([]Task, error) {
	if n <= 0 {
		return nil, nil
	}
	until := time.Now().Add(lease).UnixMilli()
	from := s.claimFrom(jobID)
	var out []Task
	err := s.write(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		// The claim takes the job's row only at its end, for the counts:
		// its tasks are picked with SKIP LOCKED, so claims run beside a
		// group commit (which holds the job's row throughout, for the
		// order of done numbers) instead of waiting for it, and no lock
		// order is broken (the tasks a claim takes are pending ones, which
		// no transaction holding the job's row waits for).
		//
		// The chunk is picked once, in a CTE: as an IN subquery,
		// PostgreSQL may run it again per row, and with SKIP LOCKED each run
		// picks other tasks.
		rows, err := tx.QueryContext(ctx, s.q(`WITH picked AS (SELECT seq FROM tasks WHERE job_id = ? AND done_seq = 0 AND state = 0 AND seq >= ? ORDER BY seq LIMIT ?`+s.d.skipLocked+`)
			UPDATE tasks SET state = 1, lease_owner = ?, attempts = attempts + 1
			FROM picked WHERE tasks.job_id = ? AND tasks.seq = picked.seq
			RETURNING tasks.seq, item, grp, run, custom_id, line, request, attempts`), jobID, from, n, owner, jobID)
		if err != nil {
			return err
		}
		var d delta
		for rows.Next() {
			t := Task{State: ItemRunning}
			if err := rows.Scan(&t.Seq, &t.Item, &t.Group, &t.Run, &t.CustomID, &t.Line, &t.Request, &t.Attempts); err != nil {
				_ = rows.Close()
				return err
			}
			out = append(out, t)
			d.move(t.Group, ItemPending, ItemRunning, 1)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		if err := s.apply(ctx, tx, jobID, &d); err != nil {
			return err
		}
		// The owner's lease on the job, renewed by every claim; its
		// tasks carry only the owner's name.
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO leases (job_id, owner, until) VALUES (?, ?, ?)
			ON CONFLICT (job_id, owner) DO UPDATE SET until = excluded.until`), jobID, owner, until)
		return err
	})
	sortTasks(out)
	switch {
	case err != nil:
	case len(out) < n && from > 0:
		s.shortClaim(jobID, time.Now())
	case len(out) > 0:
		s.raiseFrom(jobID, out[len(out)-1].Seq+1)
	}
	return out, err
}

func sortTasks(ts []Task) {
	// Insertion sort: RETURNING gives the rows almost in order.
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Seq < ts[j-1].Seq; j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// number reserves n done numbers of the job and returns the one before the
// first. On PostgreSQL it locks the job's row until the transaction ends,
// so that done numbers follow commit order across replicas. Every write
// transaction that ends or returns a job's tasks calls it first: one lock
// order (the job, then its tasks) keeps transactions from deadlocking. A
// claim takes it last (see Claim). Should PostgreSQL still report a
// deadlock, write runs the transaction again.
func (s *sqlStore) number(ctx context.Context, tx *sql.Tx, jobID string, n int) (int64, error) {
	var end int64
	err := tx.QueryRowContext(ctx, s.q(`UPDATE jobs SET done_seq = done_seq + ? WHERE id = ? RETURNING done_seq`), n, jobID).Scan(&end)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %q", ErrNotFound, jobID)
	}
	return end - int64(n), err
}

func (s *sqlStore) Complete(ctx context.Context, jobID, owner string, outs []Outcome) (int, error) {
	if len(outs) == 0 {
		return 0, nil
	}
	recorded := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		recorded = 0
		base, err := s.number(ctx, tx, jobID, len(outs))
		if err != nil {
			return err
		}
		matched, err := s.d.completeRows(ctx, s, tx, jobID, outs, base, `state = 1 AND lease_owner = ?`, []any{owner})
		if err != nil {
			return err
		}
		var d delta
		judges := make(map[int64]int64)
		for i := range outs {
			o := &outs[i]
			o.DoneSeq = 0
			if !matched[i] {
				continue
			}
			o.DoneSeq = base + int64(i) + 1
			recorded++
			d.move(o.Group, ItemRunning, o.State, 1)
			d.tokensIn += o.TokensIn
			d.tokensOut += o.TokensOut
			d.cost += o.Cost
			d.online += o.OnlineCost
			if o.JudgeSeq >= 0 && o.Group != GroupJudge {
				judges[o.JudgeSeq] = o.RunsFrom
			}
		}
		for judge := range judges {
			s.lowerFrom(jobID, judge)
		}
		for judge, from := range judges {
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE tasks SET state = 0 WHERE job_id = ? AND seq = ? AND state = 6
				AND NOT EXISTS (SELECT 1 FROM tasks r WHERE r.job_id = ? AND r.seq >= ? AND r.seq < ? AND r.state IN (0, 1, 6))`),
				jobID, judge, jobID, from, judge); err != nil {
				return err
			}
		}
		if recorded == 0 {
			return nil
		}
		return s.apply(ctx, tx, jobID, &d)
	})
	return recorded, err
}

func (s *sqlStore) EndPending(ctx context.Context, jobID string, state ItemState, result []byte, n int) (int, error) {
	ended := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		ended = 0
		if _, err := s.number(ctx, tx, jobID, 0); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, s.q(`SELECT seq, grp FROM tasks WHERE job_id = ? AND done_seq = 0 AND state IN (0, 6) ORDER BY seq LIMIT ?`+s.d.skipLocked), jobID, n)
		if err != nil {
			return err
		}
		var outs []Outcome
		for rows.Next() {
			o := Outcome{State: state, Result: result, JudgeSeq: -1}
			if err := rows.Scan(&o.Seq, &o.Group); err != nil {
				_ = rows.Close()
				return err
			}
			outs = append(outs, o)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil || len(outs) == 0 {
			return err
		}
		base, err := s.number(ctx, tx, jobID, len(outs))
		if err != nil {
			return err
		}
		matched, err := s.d.completeRows(ctx, s, tx, jobID, outs, base, `state IN (0, 6)`, nil)
		if err != nil {
			return err
		}
		var d delta
		for i := range outs {
			if matched[i] {
				ended++
				d.move(outs[i].Group, ItemPending, state, 1)
			}
		}
		return s.apply(ctx, tx, jobID, &d)
	})
	return ended, err
}

// completeRowsEach updates the rows one statement each: cheap on SQLite,
// where a statement is a function call, and each one a primary-key lookup.
func completeRowsEach(ctx context.Context, s *sqlStore, tx *sql.Tx, jobID string, outs []Outcome, base int64, cond string, condArgs []any) ([]bool, error) {
	stmt, err := tx.PrepareContext(ctx, s.q(`UPDATE tasks SET state = ?, model = ?, result = ?, tokens_in = ?, tokens_out = ?,
		done_seq = ?, lease_owner = '' WHERE job_id = ? AND seq = ? AND `+cond))
	if err != nil {
		return nil, err
	}
	defer func() { _ = stmt.Close() }()
	matched := make([]bool, len(outs))
	args := make([]any, 8, 8+len(condArgs))
	// Each row is a primary-key update of microseconds: it runs without
	// ctx's cancel, which costs the SQLite driver a goroutine and two
	// progress-handler calls a statement, and ctx is checked between rows.
	rowCtx := context.WithoutCancel(ctx)
	for i := range outs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		o := &outs[i]
		args = append(args[:0], int(o.State), o.Model, o.Result, o.TokensIn, o.TokensOut, base+int64(i)+1, jobID, o.Seq)
		args = append(args, condArgs...)
		res, err := stmt.ExecContext(rowCtx, args...)
		if err != nil {
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		matched[i] = n > 0
	}
	return matched, nil
}

func (s *sqlStore) Extend(ctx context.Context, owner string, lease time.Duration) error {
	// One row per job the owner claimed from: no task is touched, and no
	// job's row is locked.
	until := time.Now().Add(lease).UnixMilli()
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`UPDATE leases SET until = ? WHERE owner = ?`), until, owner)
		return err
	})
}

func (s *sqlStore) Hold(ctx context.Context, jobID, owner string, lease time.Duration) error {
	until := time.Now().Add(lease).UnixMilli()
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO leases (job_id, owner, until) VALUES (?, ?, ?)
			ON CONFLICT (job_id, owner) DO UPDATE SET until = excluded.until`), jobID, owner, until)
		return err
	})
}

func (s *sqlStore) Abandoned(ctx context.Context, before time.Time, n int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id FROM jobs WHERE state = ? AND created_at < ?
		AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.job_id = jobs.id) ORDER BY created_at LIMIT ?`),
		int(StateValidating), before.UnixNano(), n)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func (s *sqlStore) Release(ctx context.Context, owner string, now time.Time) (int, error) {
	// The leases to end: those that ran out, or every one of owner's.
	query, arg := `SELECT job_id, owner FROM leases WHERE until < ?`, any(now.UnixMilli())
	if owner != "" {
		query, arg = `SELECT job_id, owner FROM leases WHERE owner = ?`, owner
	}
	type lease struct{ job, owner string }
	var ended []lease
	rows, err := s.db.QueryContext(ctx, s.q(query), arg)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var l lease
		if err := rows.Scan(&l.job, &l.owner); err != nil {
			_ = rows.Close()
			return 0, err
		}
		ended = append(ended, l)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	released := 0
	for _, l := range ended {
		err := s.write(ctx, func(tx *sql.Tx) error {
			if _, err := s.number(ctx, tx, l.job, 0); errors.Is(err, ErrNotFound) {
				_, err = tx.ExecContext(ctx, s.q(`DELETE FROM leases WHERE job_id = ?`), l.job)
				return err
			} else if err != nil {
				return err
			}
			// Under the job's lock, the lease ends unless its owner renewed
			// it meanwhile; then its tasks go back.
			cond, arg := `until < ?`, any(now.UnixMilli())
			if owner != "" {
				cond, arg = `1 = 1`, nil
			}
			args := []any{l.job, l.owner}
			if arg != nil {
				args = append(args, arg)
			}
			res, err := tx.ExecContext(ctx, s.q(`DELETE FROM leases WHERE job_id = ? AND owner = ? AND `+cond), args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			rows, err := tx.QueryContext(ctx, s.q(`UPDATE tasks SET state = 0, lease_owner = '' WHERE job_id = ? AND done_seq = 0 AND state = 1 AND lease_owner = ? RETURNING grp`),
				l.job, l.owner)
			if err != nil {
				return err
			}
			var d delta
			n := 0
			for rows.Next() {
				var g int
				if err := rows.Scan(&g); err != nil {
					_ = rows.Close()
					return err
				}
				d.move(g, ItemRunning, ItemPending, 1)
				n++
			}
			_ = rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			released += n
			if n == 0 {
				return nil
			}
			s.lowerFrom(l.job, -1)
			return s.apply(ctx, tx, l.job, &d)
		})
		if err != nil {
			return released, err
		}
	}
	return released, nil
}

const taskColumns = `seq, item, grp, run, custom_id, line, state, request, model, result, tokens_in, tokens_out, done_seq, attempts`

func (s *sqlStore) queryTasks(ctx context.Context, query string, args ...any) ([]Task, error) {
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []Task
	for rows.Next() {
		var t Task
		var state int
		if err := rows.Scan(&t.Seq, &t.Item, &t.Group, &t.Run, &t.CustomID, &t.Line, &state, &t.Request, &t.Model, &t.Result,
			&t.TokensIn, &t.TokensOut, &t.DoneSeq, &t.Attempts); err != nil {
			return nil, err
		}
		t.State = ItemState(state)
		out = append(out, t)
	}
	return out, rows.Err()
}

func (s *sqlStore) Results(ctx context.Context, jobID string, after int64, state ItemState, n int) ([]Task, error) {
	switch {
	case state.Terminal() && state != ItemSucceeded:
		// Spelled out so that both stores use the partial index
		// tasks_unsucceeded: a job's failures are few among its rows.
		return s.queryTasks(ctx, `SELECT `+taskColumns+` FROM tasks WHERE job_id = ? AND done_seq > 0 AND state <> 2 AND state = ? AND seq > ? ORDER BY seq LIMIT ?`,
			jobID, int(state), after, n)
	case state.Terminal():
		return s.resultsWindowed(ctx, jobID, after, n, `state = ?`, int(state))
	}
	return s.resultsWindowed(ctx, jobID, after, n, `state IN (2, 3, 4, 5)`)
}

// resultsWindow is how many Seqs one query of resultsWindowed reads at
// most, per result asked for.
const resultsWindow = 4

// resultsWindowed reads results in bounded ranges of Seq: each query names
// both ends of its range on the primary key, so that whatever the planner
// believes of the tasks' states (statistics taken while they were all
// pending, autovacuum off), no plan reads more than the range. A page of a
// finished job is one query; the ranges go on until n results are found or
// the job's last Seq is passed.
func (s *sqlStore) resultsWindowed(ctx context.Context, jobID string, after int64, n int, cond string, condArgs ...any) ([]Task, error) {
	var out []Task
	last := int64(-1) // the job's last Seq, read when first needed
	width := int64(max(n, 1) * resultsWindow)
	for lo := after; len(out) < n; lo += width {
		args := append([]any{jobID, lo, lo + width}, condArgs...)
		ts, err := s.queryTasks(ctx, `SELECT `+taskColumns+` FROM tasks WHERE job_id = ? AND seq > ? AND seq <= ? AND `+cond+
			` ORDER BY seq LIMIT ?`, append(args, n-len(out))...)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
		if len(out) >= n {
			break
		}
		if last < 0 {
			if err := s.db.QueryRowContext(ctx, s.q(`SELECT COALESCE(MAX(seq), -1) FROM tasks WHERE job_id = ?`), jobID).Scan(&last); err != nil {
				return nil, err
			}
		}
		if lo+width >= last {
			break
		}
	}
	return out, nil
}

func (s *sqlStore) Done(ctx context.Context, jobID string, after int64, n int) ([]Task, error) {
	// "done_seq > 0" spelled out lets PostgreSQL use its partial index
	// tasks_done in a generic plan too, where after is a parameter.
	return s.queryTasks(ctx, `SELECT `+taskColumns+` FROM tasks WHERE job_id = ? AND done_seq > 0 AND done_seq > ? ORDER BY done_seq LIMIT ?`,
		jobID, after, n)
}

func (s *sqlStore) Tasks(ctx context.Context, jobID string, from, to int64) ([]Task, error) {
	return s.queryTasks(ctx, `SELECT `+taskColumns+` FROM tasks WHERE job_id = ? AND seq >= ? AND seq < ? ORDER BY seq`,
		jobID, from, to)
}
