package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Liveness is a store that can tell a live lease owner from a dead one, so
// that a dead process's claims return to pending at once instead of when
// its lease ends. PostgreSQL's store has it: each owner holds a
// session-level advisory lock on a connection of its own, which the server
// releases the moment that connection drops (a crash, kill -9, a lost
// host once TCP notices).
type Liveness interface {
	// Live marks owner alive for as long as the store is open. It fails if
	// another live process already uses the name.
	Live(ctx context.Context, owner string) error
	// ReleaseDead puts back to pending every task held by an owner other
	// than self that is not alive, and returns how many went back.
	ReleaseDead(ctx context.Context, self string) (int, error)
}

// ownerLockClass is the first key of the owners' advisory locks
// (pg_advisory_lock(int, int)): "jobs" in ASCII. The two-key lock space
// does not overlap the one-key space of the tenant locks.
const ownerLockClass = 0x6a6f6273

// pgStore is the PostgreSQL store: the shared queries, and owner liveness
// through advisory locks.
type pgStore struct {
	*sqlStore

	mu   sync.Mutex
	live *sql.Conn // holds this process's owner lock; nil until Live
}

var _ Liveness = (*pgStore)(nil)

func (s *pgStore) Live(ctx context.Context, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live != nil {
		return errors.New("jobs: Live called twice")
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	var ok bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, ownerLockClass, owner).Scan(&ok); err != nil {
		_ = conn.Close()
		return fmt.Errorf("jobs: taking the owner lock: %w", err)
	}
	if !ok {
		_ = conn.Close()
		return fmt.Errorf("jobs: owner %q is already live in another process", owner)
	}
	s.live = conn
	return nil
}

func (s *pgStore) ReleaseDead(ctx context.Context, self string) (int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT owner FROM leases WHERE owner <> $1`, self)
	if err != nil {
		return 0, err
	}
	var owners []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			_ = rows.Close()
			return 0, err
		}
		owners = append(owners, o)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil || len(owners) == 0 {
		return 0, err
	}
	// A lock and its unlock must share a session.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	released := 0
	for _, o := range owners {
		var got bool
		if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, ownerLockClass, o).Scan(&got); err != nil {
			return released, err
		}
		if !got {
			continue // alive
		}
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, ownerLockClass, o); err != nil {
			return released, err
		}
		n, err := s.Release(ctx, o, time.Now())
		released += n
		if err != nil {
			return released, err
		}
	}
	return released, nil
}

func (s *pgStore) Close() error {
	s.mu.Lock()
	if s.live != nil {
		_ = s.live.Close()
		s.live = nil
	}
	s.mu.Unlock()
	return s.sqlStore.Close()
}
