package jobs

import (
	"context"
	"database/sql"
	"time"
)

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
