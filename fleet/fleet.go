package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/batcherhq/batcher/batcher"
)

// The fleet's adaptation of configured rates, as the core's own: halve on
// a 429 (at most once per lowerGap, so that one burst of 429s over
// several replicas halves once), climb back a tenth after each run of ten
// successes, never below 5%.
const (
	adaptFloor     = 0.05
	adaptStep      = 0.1
	adaptSuccesses = 10
	lowerGap       = time.Second
)

// Fleet is one replica's membership of a fleet. It implements
// batcher.Coordinator. Start it before the Batcher dispatches, Close it
// after the Batcher has shut down.
type Fleet struct {
	cfg    config
	rdb    redis.UniversalClient
	owned  bool // rdb was made by Open: Close closes it
	log    *slog.Logger
	keys   keys
	m      *metrics
	joined time.Time

	mu       sync.Mutex
	budgets  []*budget // in registration order
	started  bool
	stop     chan struct{}
	stopped  chan struct{}
	status   Status // the last heartbeat's view
	infoJSON string

	down     chan struct{} // closed when the replica goes to local mode; guarded by mu
	ps       *redis.PubSub // this replica's channel: hand-offs to its waiters
	listened chan struct{} // closed when the listener has stopped

	// channel is this replica's pub/sub channel, where a replica that frees
	// a slot tells it which of its waiters got it (scripts.go).
	channel string
	seq     atomic.Uint64 // numbers the replica's members (bookings)
	wmu     sync.Mutex
	waiters map[string]*waiter // members waiting in a queue, by member
	// dropNotes makes the listener lose every message (tests: the
	// heartbeat's fallback).
	dropNotes atomic.Bool

	local   atomic.Bool  // Redis is unreachable: every budget holds its local share
	n       atomic.Int32 // replicas, as last known (at least 1)
	trips   [numOps]atomic.Int64
	batches atomic.Int64  // bookings that went to Redis
	leaves  atomic.Int64  // times this replica went to local mode
	kick    chan struct{} // wakes the heartbeat early
}

type keys struct{ members, info string }

// Operations counted as round trips.
const (
	opAcquire = iota
	opRelease
	opHeartbeat
	numOps
)

// Open connects to the Redis at url (redis://[user:password@]host:port/db,
// rediss:// for TLS) with the fleet's short timeouts, and returns a Fleet
// over it. Nothing is sent yet: Start joins.
func Open(url string, opts ...Option) (*Fleet, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	cfg, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = cfg.timeout, cfg.timeout, cfg.timeout
	o.PoolTimeout = cfg.timeout
	o.MaxRetries = -1 // a failure goes to local mode at once, not after retries
	o.ContextTimeoutEnabled = true
	// Maintenance notifications are Redis Enterprise's; off, they start no
	// goroutine.
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	f, err := New(redis.NewClient(o), opts...)
	if err != nil {
		return nil, err
	}
	f.owned = true
	return f, nil
}

// New returns a Fleet over rdb.
func New(rdb redis.UniversalClient, opts ...Option) (*Fleet, error) {
	cfg, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	f := &Fleet{
		cfg:     cfg,
		rdb:     rdb,
		log:     cfg.logger,
		keys:    keys{members: cfg.prefix + ":members", info: cfg.prefix + ":members:info"},
		kick:    make(chan struct{}, 1),
		down:    make(chan struct{}),
		channel: cfg.prefix + ":wake:" + cfg.id,
		waiters: map[string]*waiter{},
	}
	f.n.Store(1)
	f.joined = time.Now()
	f.SetInfo(cfg.info)
	if f.m, err = newMetrics(cfg.mp, f); err != nil {
		return nil, fmt.Errorf("fleet metrics: %w", err)
	}
	return f, nil
}

// SetInfo replaces what this replica says of itself to the others (its
// addresses, once it listens); the time it joined is added.
func (f *Fleet) SetInfo(kv map[string]string) {
	info := map[string]string{"joined": f.joined.UTC().Format(time.RFC3339)}
	for k, v := range kv {
		info[k] = v
	}
	b, _ := json.Marshal(info)
	f.mu.Lock()
	f.infoJSON = string(b)
	f.mu.Unlock()
}

// RedisLogsTo sends go-redis's own log lines (a failed dial, a bad
// connection) to l at debug level: the fleet says at warn what matters,
// once. It sets go-redis's logger for the whole process.
func RedisLogsTo(l *slog.Logger) { redis.SetLogger(redisLog{l}) }

type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

// ID returns this replica's id.
func (f *Fleet) ID() string { return f.cfg.id }

// Budget implements batcher.Coordinator.
func (f *Fleet) Budget(backend string, local batcher.LocalBudget) batcher.SharedBudget {
	tag := "{" + f.cfg.prefix + ":b:" + backend + "}"
	b := &budget{f: f, name: backend, local: local, keys: []string{tag + ":s", tag + ":l", tag + ":q", tag + ":w"}, mine: map[string]bool{}}
	f.mu.Lock()
	f.budgets = append(f.budgets, b)
	f.mu.Unlock()
	local.Share(1 / float64(f.n.Load()))
	return b
}

// Start joins the fleet (one heartbeat; Redis unreachable puts the replica
// in local mode, it does not fail) and keeps heartbeating until Close.
func (f *Fleet) Start(ctx context.Context) {
	f.mu.Lock()
	if f.started {
		f.mu.Unlock()
		return
	}
	f.started = true
	f.stop, f.stopped = make(chan struct{}), make(chan struct{})
	f.listened = make(chan struct{})
	// The subscription reconnects by itself; a message sent while it is
	// away is lost, and the heartbeat finds what it said.
	f.ps = f.rdb.Subscribe(context.Background(), f.channel)
	f.mu.Unlock()
	go f.listen(f.ps.Channel())
	f.beat(ctx)
	go f.loop()
}

// listen delivers the hand-offs published on the replica's channel to
// their waiters, until the subscription closes.
func (f *Fleet) listen(ch <-chan *redis.Message) {
	defer close(f.listened)
	for m := range ch {
		var note []string
		if f.dropNotes.Load() || json.Unmarshal([]byte(m.Payload), &note) != nil || len(note) < 2 {
			continue
		}
		f.deliver(note[0], answer(note[1:]), time.Time{})
	}
}

// Close leaves the fleet: heartbeats stop and the replica's membership is
// removed (its leases expire with their TTL, or went with their batches).
// It closes the Redis client when Open made it.
func (f *Fleet) Close(ctx context.Context) error {
	f.mu.Lock()
	started := f.started
	f.started = false
	f.mu.Unlock()
	if started {
		close(f.stop)
		<-f.stopped
		_ = f.ps.Close()
		<-f.listened
		if !f.local.Load() {
			_ = leaveScript.Run(ctx, f.rdb, []string{f.keys.members, f.keys.info}, f.cfg.id).Err()
		}
	}
	if f.m != nil {
		f.m.unregister()
	}
	if f.owned {
		return f.rdb.Close()
	}
	return nil
}
