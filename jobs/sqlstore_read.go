package jobs

import (
	"context"
)

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
