package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/jobs/storetest"
)

func TestSQLiteStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) jobs.Store { return openSQLite(t, t.TempDir()) })
}

func TestPostgresStore(t *testing.T) {
	s := openPostgres(t)
	storetest.Run(t, func(*testing.T) jobs.Store { return s })
}

func openSQLite(t *testing.T, dir string) jobs.Store {
	t.Helper()
	s, err := jobs.OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openPostgres opens a store in a schema of the test's own.
func openPostgres(t *testing.T) jobs.Store {
	t.Helper()
	dsn := storetest.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := jobs.OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
