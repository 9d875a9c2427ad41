package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
)

// TestSQLiteMigrationsDownAndUp: every SQLite migration's Down undoes its
// Up: the schema goes down to nothing and up again, twice, and a store
// opens on it.
func TestSQLiteMigrationsDownAndUp(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db, p := sqliteMigrator(t, dir)
	for range 2 {
		if _, err := p.Up(ctx); err != nil {
			t.Fatalf("up: %v", err)
		}
		if _, err := p.DownTo(ctx, 0); err != nil {
			t.Fatalf("down: %v", err)
		}
		if v, err := p.GetDBVersion(ctx); err != nil || v != 0 {
			t.Fatalf("after down: version %d, %v", v, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSQLite(context.Background(), dir)
	if err != nil {
		t.Fatalf("open after the round trips: %v", err)
	}
	_ = s.Close()
}

// TestSQLitePlansUseThePartialIndexes: the queries that page through a
// large job read the partial index meant for them, not the whole table
// (SQLite uses a partial index only when the query spells its condition).
func TestSQLitePlansUseThePartialIndexes(t *testing.T) {
	db := freshSQLite(t)
	for _, tc := range []struct{ query, index string }{
		{`SELECT seq FROM tasks WHERE job_id = ? AND done_seq = 0 AND state = 0 AND seq >= ? ORDER BY seq LIMIT ?`, "tasks_open"},
		{`SELECT seq FROM tasks WHERE job_id = ? AND done_seq > 0 AND done_seq > ? ORDER BY done_seq LIMIT ?`, "tasks_done"},
		{`SELECT seq FROM tasks WHERE job_id = ? AND done_seq > 0 AND state <> 2 AND state = ? AND seq > ? ORDER BY seq LIMIT ?`, "tasks_unsucceeded"},
	} {
		plan := queryPlan(t, db, tc.query, "job", 1, 2, 3)
		if !strings.Contains(plan, "INDEX "+tc.index) {
			t.Errorf("%s\nplan %q, want index %s", tc.query, plan, tc.index)
		}
	}
}

// TestSQLitePlansListByKind: a list of one kind's jobs (the Batch API's)
// reads an index in its order, with or without a tenant, not every job.
func TestSQLitePlansListByKind(t *testing.T) {
	db := freshSQLite(t)
	for _, tc := range []struct{ query, index string }{
		{`SELECT id FROM jobs WHERE 1 = 1 AND tenant = ? AND kind = ? ORDER BY created_at DESC, id DESC LIMIT ?`, "jobs_tenant_kind_created"},
		{`SELECT id FROM jobs WHERE 1 = 1 AND kind = ? ORDER BY created_at DESC, id DESC LIMIT ?`, "jobs_kind_created"},
	} {
		plan := queryPlan(t, db, tc.query, "t", "k", 3)
		if !strings.Contains(plan, "INDEX "+tc.index) || strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("%s\nplan %q, want index %s in its order", tc.query, plan, tc.index)
		}
	}
}

// TestSQLiteKindBackfill: the migration that adds a job's kind gives it to
// the Batch API's jobs made before it (known by their endpoint tag), and
// to no other job, not even one whose metadata value spells the tag.
func TestSQLiteKindBackfill(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db, p := sqliteMigrator(t, dir)
	if _, err := p.UpTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	for id, md := range map[string]map[string]string{
		"batch": {"batcher.openai.endpoint": "/v1/chat/completions", "team": "x"},
		"plain": {"team": `"batcher.openai.endpoint":"x`},
	} {
		spec, err := json.Marshal(Spec{Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO jobs (id, spec, state, created_at) VALUES (?, ?, 1, 1)`, id, string(spec)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"batch": KindOpenAIBatch, "plain": ""} {
		var kind string
		if err := db.QueryRowContext(ctx, `SELECT kind FROM jobs WHERE id = ?`, id).Scan(&kind); err != nil || kind != want {
			t.Errorf("job %s: kind %q (%v), want %q", id, kind, err, want)
		}
	}
}

// sqliteMigrator opens the SQLite database in dir, closed when the test
// ends (closing it earlier is harmless), and a goose provider of the
// SQLite migrations over it, which the test runs step by step.
func sqliteMigrator(t *testing.T, dir string) (*sql.DB, *goose.Provider) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, SQLiteFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sub, err := fs.Sub(migrations, "migrations/sqlite")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub)
	if err != nil {
		t.Fatal(err)
	}
	return db, p
}

// freshSQLite opens a new SQLite store, migrated, closed at the test's
// end, and returns its database.
func freshSQLite(t *testing.T) *sql.DB {
	t.Helper()
	st, err := OpenSQLite(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st.(*sqlStore).db
}

// queryPlan is SQLite's plan for query, its steps joined by "; ".
func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}
