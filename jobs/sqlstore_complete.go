package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

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
