package jobs

import (
	"context"
	"database/sql"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"
)

// TestSQLiteMigrationsDownAndUp: every SQLite migration's Down undoes its
// Up: the schema goes down to nothing and up again, twice, and a store
// opens on it.
func TestSQLiteMigrationsDownAndUp(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, SQLiteFile))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	sub, err := fs.Sub(migrations, "migrations/sqlite")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub)
	if err != nil {
		t.Fatal(err)
	}
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
