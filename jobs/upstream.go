package jobs

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Step is how far a chunk dispatched through a batch API got: each step is
// recorded before the upstream call it names, and its result (an id) with
// the next step, so that a restart knows what to look for upstream.
type Step uint8

// The steps of a chunk.
const (
	// StepClaimed: its tasks are chosen; nothing is upstream.
	StepClaimed Step = iota + 1
	// StepUploading: the input file may be upstream under FileName
	// (FindFile finds it).
	StepUploading
	// StepCreating: FileID is uploaded; a batch over it may exist, tagged
	// with the job's id and the chunk (Find finds it).
	StepCreating
	// StepRunning: BatchID runs upstream.
	StepRunning
	// StepDone: its results are recorded, or its tasks went back.
	StepDone
)

var stepNames = [...]string{"", "claimed", "uploading", "creating", "running", "done"}

func (s Step) String() string {
	if int(s) < len(stepNames) {
		return stepNames[s]
	}
	return fmt.Sprintf("step(%d)", s)
}

// Chunk is one upstream batch of a job, as the store keeps it.
type Chunk struct {
	JobID    string
	Chunk    int
	Route    string
	Step     Step
	Seqs     []int64 // its tasks
	FileName string
	FileID   string
	BatchID  string
	// Status and the counts are the upstream batch's at the last look.
	Status    string
	Total     int64
	Completed int64
	Failed    int64
	ETA       time.Time // zero: unknown
	UpdatedAt time.Time
	// CreateStarted is when the last create call of its batch began
	// (zero: none yet), recorded before the call: until CreateStarted +
	// BatchRoute.CreateTimeout that call may still be in flight.
	CreateStarted time.Time

	tasks []Task // a new chunk's tasks, without their requests
	// tokens estimates its lines against the route's token budget (0: not
	// measured yet); enqueued is what it holds of the budget.
	tokens, enqueued int64
}

// ChunkStore is what batch-API dispatch needs of a store beyond Store; the
// SQL stores implement it.
type ChunkStore interface {
	// SaveChunk inserts or replaces a chunk.
	SaveChunk(ctx context.Context, c *Chunk) error
	// Chunks returns the job's chunks in order.
	Chunks(ctx context.Context, jobID string) ([]Chunk, error)
	// BatchRecorded reports whether any chunk of any job records the
	// upstream batch id.
	BatchRecorded(ctx context.Context, batchID string) (bool, error)
	// ClaimSeqs claims for owner, until now+lease, those of the job's
	// tasks in seqs that are pending, and returns them with those owner
	// already holds, in Seq order: a chunk's tasks again after a restart.
	ClaimSeqs(ctx context.Context, jobID, owner string, seqs []int64, lease time.Duration) ([]Task, error)
}

func encodeSeqs(seqs []int64) []byte {
	b := make([]byte, 0, len(seqs)*3)
	prev := int64(0)
	for _, s := range seqs {
		b = binary.AppendVarint(b, s-prev)
		prev = s
	}
	return b
}

func decodeSeqs(b []byte) ([]int64, error) {
	var out []int64
	prev := int64(0)
	for len(b) > 0 {
		d, n := binary.Varint(b)
		if n <= 0 {
			return nil, errors.New("jobs: a chunk's task list is corrupt")
		}
		prev += d
		out = append(out, prev)
		b = b[n:]
	}
	return out, nil
}

func (s *sqlStore) SaveChunk(ctx context.Context, c *Chunk) error {
	var eta, started int64
	if !c.ETA.IsZero() {
		eta = c.ETA.UnixMilli()
	}
	if !c.CreateStarted.IsZero() {
		started = c.CreateStarted.UnixMilli()
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO upstream_batches (job_id, chunk, route, step, seqs, file_name, file_id, batch_id, status, total, completed, failed, eta, updated_at, create_started)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job_id, chunk) DO UPDATE SET route = excluded.route, step = excluded.step, seqs = excluded.seqs,
			file_name = excluded.file_name, file_id = excluded.file_id, batch_id = excluded.batch_id, status = excluded.status,
			total = excluded.total, completed = excluded.completed, failed = excluded.failed, eta = excluded.eta, updated_at = excluded.updated_at,
			create_started = excluded.create_started`),
			c.JobID, c.Chunk, c.Route, int(c.Step), encodeSeqs(c.Seqs), c.FileName, c.FileID, c.BatchID, c.Status,
			c.Total, c.Completed, c.Failed, eta, time.Now().UnixMilli(), started)
		return err
	})
}

func (s *sqlStore) Chunks(ctx context.Context, jobID string) ([]Chunk, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT chunk, route, step, seqs, file_name, file_id, batch_id, status, total, completed, failed, eta, updated_at, create_started
		FROM upstream_batches WHERE job_id = ? ORDER BY chunk`), jobID)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []Chunk
	for rows.Next() {
		c := Chunk{JobID: jobID}
		var step int
		var seqs []byte
		var eta, upd, started int64
		if err := rows.Scan(&c.Chunk, &c.Route, &step, &seqs, &c.FileName, &c.FileID, &c.BatchID, &c.Status,
			&c.Total, &c.Completed, &c.Failed, &eta, &upd, &started); err != nil {
			return nil, err
		}
		c.Step = Step(step)
		if c.Seqs, err = decodeSeqs(seqs); err != nil {
			return nil, err
		}
		if eta > 0 {
			c.ETA = time.UnixMilli(eta)
		}
		c.UpdatedAt = time.UnixMilli(upd)
		if started > 0 {
			c.CreateStarted = time.UnixMilli(started)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (s *sqlStore) BatchRecorded(ctx context.Context, batchID string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM upstream_batches WHERE batch_id = ?`), batchID).Scan(&n)
	return n > 0, err
}

func (s *sqlStore) ClaimSeqs(ctx context.Context, jobID, owner string, seqs []int64, lease time.Duration) ([]Task, error) {
	var out []Task
	until := time.Now().Add(lease).UnixMilli()
	for from := 0; from < len(seqs); from += maxInsertRows {
		part := seqs[from:min(from+maxInsertRows, len(seqs))]
		in := "(" + strings.TrimSuffix(strings.Repeat("?,", len(part)), ",") + ")"
		args := make([]any, 0, len(part)+2)
		args = append(args, jobID)
		for _, q := range part {
			args = append(args, q)
		}
		err := s.write(ctx, func(tx *sql.Tx) error {
			var got []Task
			var d delta
			// Those pending become owner's; those owner holds stay.
			rows, err := tx.QueryContext(ctx, s.q(`SELECT seq, item, grp, run, custom_id, line, request, attempts, state, lease_owner
				FROM tasks WHERE job_id = ? AND done_seq = 0 AND seq IN `+in), args...)
			if err != nil {
				return err
			}
			var take []any
			for rows.Next() {
				t := Task{State: ItemRunning}
				var state int
				var lo string
				if err := rows.Scan(&t.Seq, &t.Item, &t.Group, &t.Run, &t.CustomID, &t.Line, &t.Request, &t.Attempts, &state, &lo); err != nil {
					_ = rows.Close()
					return err
				}
				switch {
				case state == int(ItemPending):
					take = append(take, t.Seq)
					d.move(t.Group, ItemPending, ItemRunning, 1)
					t.Attempts++
				case state == int(ItemRunning) && lo == owner:
				default:
					continue
				}
				got = append(got, t)
			}
			_ = rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(take) > 0 {
				in := "(" + strings.TrimSuffix(strings.Repeat("?,", len(take)), ",") + ")"
				if _, err := tx.ExecContext(ctx, s.q(`UPDATE tasks SET state = 1, lease_owner = ?, attempts = attempts + 1 WHERE job_id = ? AND state = 0 AND seq IN `+in),
					append([]any{owner, jobID}, take...)...); err != nil {
					return err
				}
				if err := s.apply(ctx, tx, jobID, &d); err != nil {
					return err
				}
			}
			_, err = tx.ExecContext(ctx, s.q(`INSERT INTO leases (job_id, owner, until) VALUES (?, ?, ?)
				ON CONFLICT (job_id, owner) DO UPDATE SET until = excluded.until`), jobID, owner, until)
			if err == nil {
				out = append(out, got...)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	sortTasks(out)
	return out, nil
}
