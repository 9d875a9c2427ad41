package jobs

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// migrations holds each store's versioned schema, applied at open by goose.
//
//go:embed migrations
var migrations embed.FS

// migrate brings db's schema up to date with the migrations in dir.
func migrate(ctx context.Context, db *sql.DB, dialect goose.Dialect, dir string) error {
	sub, err := fs.Sub(migrations, "migrations/"+dir)
	if err != nil {
		return err
	}
	var opts []goose.ProviderOption
	if dialect == goose.DialectPostgres {
		// Replicas starting together take turns.
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(dialect, db, sub, opts...)
	if err != nil {
		return fmt.Errorf("jobs: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("jobs: migrating the schema: %w", err)
	}
	return nil
}
