package jobs

import (
	"context"
	"database/sql"
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
