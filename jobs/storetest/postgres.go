package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresDSN is the test database: BATCHER_TEST_POSTGRES_DSN, or the local
// service (127.0.0.1:5432, user postgres, database test).
func PostgresDSN() string {
	if dsn := os.Getenv("BATCHER_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// PostgresSchema creates a schema of its own for the test, dropped at its
// end, and returns the test database's DSN pointed at it. When PostgreSQL is
// unreachable it skips the test, unless BATCHER_REQUIRE_SERVICES=1, which
// makes it fail.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	dsn := PostgresDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		if os.Getenv("BATCHER_REQUIRE_SERVICES") == "1" {
			t.Fatalf("PostgreSQL required (BATCHER_REQUIRE_SERVICES=1): %v", err)
		}
		t.Skipf("skipping the PostgreSQL half: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "jobs_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return
		}
		defer func() { _ = c.Close(context.Background()) }()
		_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("test DSN: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// PostgresExec runs one statement on dsn (a schema of PostgresSchema's),
// for a test or benchmark that sets up the database beyond the store.
func PostgresExec(ctx context.Context, dsn, stmt string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, stmt)
	return err
}
