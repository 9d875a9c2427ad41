package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// OpenPostgres connects to PostgreSQL at dsn and migrates the schema.
// Several processes may share one database: tasks are claimed with FOR
// UPDATE SKIP LOCKED under leases, so a dead process's claims return to
// pending once their lease ends.
func OpenPostgres(ctx context.Context, dsn string) (Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("jobs: PostgreSQL DSN: %w", err)
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(8)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("jobs: PostgreSQL at %s unreachable: %w", where, err)
	}
	if err := migrate(ctx, db, goose.DialectPostgres, "postgres"); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w (PostgreSQL at %s)", err, where)
	}
	return &pgStore{sqlStore: &sqlStore{db: db, queries: map[string]string{}, d: dialect{
		dollar:       true,
		skipLocked:   " FOR UPDATE SKIP LOCKED",
		completeRows: completeRowsUnnest,
		retryable:    pgRetryable,
		analyze:      "ANALYZE tasks",
		tenantLock:   "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))",
	}}}, nil
}

// pgRetryable reports a deadlock victim or a serialization failure.
func pgRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// completeRowsUnnest updates every row in one statement over arrays: one
// round trip for a whole group of results.
func completeRowsUnnest(ctx context.Context, s *sqlStore, tx *sql.Tx, jobID string, outs []Outcome, base int64, cond string, condArgs []any) ([]bool, error) {
	n := len(outs)
	seqs, states, ti, to, done := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	models, results := make([]string, n), make([][]byte, n)
	index := make(map[int64]int, n)
	for i := range outs {
		o := &outs[i]
		seqs[i], states[i], ti[i], to[i], done[i] = o.Seq, int64(o.State), o.TokensIn, o.TokensOut, base+int64(i)+1
		models[i], results[i] = o.Model, o.Result
		index[o.Seq] = i
	}
	args := append([]any{seqs, states, models, results, ti, to, done, jobID}, condArgs...)
	rows, err := tx.QueryContext(ctx, s.q(`UPDATE tasks t SET state = u.state, model = u.model, result = u.result,
		tokens_in = u.ti, tokens_out = u.tout, done_seq = u.done, lease_owner = ''
		FROM (SELECT unnest(?::bigint[]) AS seq, unnest(?::bigint[]) AS state, unnest(?::text[]) AS model,
			unnest(?::bytea[]) AS result, unnest(?::bigint[]) AS ti, unnest(?::bigint[]) AS tout, unnest(?::bigint[]) AS done) u
		WHERE t.job_id = ? AND t.seq = u.seq AND t.`+cond+` RETURNING t.seq`), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	matched := make([]bool, n)
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		matched[index[seq]] = true
	}
	return matched, rows.Err()
}
