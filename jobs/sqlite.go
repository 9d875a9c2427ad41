package jobs

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"
)

// SQLiteFile is the database's file name in the data directory.
const SQLiteFile = "jobs.db"

// OpenSQLite opens (creating it if needed) the SQLite store in dir, in WAL
// mode, and migrates its schema. It is meant for one process: a second
// process on the same directory would double-run jobs.
func OpenSQLite(ctx context.Context, dir string) (Store, error) {
	path := filepath.Join(dir, SQLiteFile)
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(NORMAL)", "busy_timeout(10000)", "foreign_keys(OFF)"} {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("jobs: opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("jobs: opening %s: %w", path, err)
	}
	if err := migrate(ctx, db, goose.DialectSQLite3, "sqlite"); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return &sqlStore{db: db, queries: map[string]string{}, d: dialect{
		writeMu:      new(sync.Mutex),
		completeRows: completeRowsEach,
	}}, nil
}
