package jobs

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

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
