package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.opentelemetry.io/otel/metric"

	"github.com/batcherhq/batcher/batcher"
)

// Defaults.
const (
	DefaultPrefix    = "batcher"
	DefaultHeartbeat = time.Second
	DefaultTTL       = 5 * time.Second
	// DefaultTimeout bounds each Redis command: past it the replica goes
	// to its local share rather than hold batches up.
	DefaultTimeout = 300 * time.Millisecond
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

// Option configures a Fleet.
type Option func(*config)

type config struct {
	prefix    string
	id        string
	heartbeat time.Duration
	ttl       time.Duration
	timeout   time.Duration
	logger    *slog.Logger
	mp        metric.MeterProvider
	info      map[string]string
}

// WithPrefix sets the key prefix the fleet's keys share: replicas with one
// prefix are one fleet. Default DefaultPrefix; empty fails New.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithReplicaID names this replica. Default: host name, process id and a
// random suffix. It must not contain '|'.
func WithReplicaID(id string) Option { return func(c *config) { c.id = id } }

// WithHeartbeat sets how often the replica says it is alive and renews its
// leases. Default DefaultHeartbeat; it must be under a third of the TTL.
func WithHeartbeat(d time.Duration) Option { return func(c *config) { c.heartbeat = d } }

// WithTTL sets how long a replica counts as alive, and its leases hold,
// after its last heartbeat: a dead replica's slots come back within it.
// Default DefaultTTL.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithTimeout bounds each Redis command (dial, read, write). Default
// DefaultTimeout; at least 1 ms. It applies to clients Open makes; a
// client passed to New keeps its own, which should be as short.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithLogger sets where the fleet logs leaving for local mode and
// rejoining. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMeterProvider records the fleet's metrics. Default none.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithInfo describes this replica to the others (its addresses, for the
// status page).
func WithInfo(kv map[string]string) Option { return func(c *config) { c.info = kv } }

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

func resolve(opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix, heartbeat: DefaultHeartbeat, ttl: DefaultTTL, timeout: DefaultTimeout}
	for _, o := range opts {
		o(&c)
	}
	var errs []error
	if c.prefix == "" {
		errs = append(errs, errors.New("fleet prefix: must not be empty"))
	}
	if c.id == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		c.id = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	for _, r := range c.id {
		if r == '|' {
			errs = append(errs, fmt.Errorf("fleet replica id: must not contain '|', got %q", c.id))
			break
		}
	}
	if c.ttl < 3*c.heartbeat || c.heartbeat <= 0 {
		errs = append(errs, fmt.Errorf("fleet heartbeat: must be positive and under a third of the TTL %v, got %v", c.ttl, c.heartbeat))
	}
	if c.timeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("fleet timeout: must be at least 1ms, got %v", c.timeout))
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, errors.Join(errs...)
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

func (f *Fleet) loop() {
	defer close(f.stopped)
	t := time.NewTicker(f.cfg.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		case <-f.kick:
		}
		f.beat(context.Background())
	}
}

// beat is one heartbeat: membership, the renewal of leases and waiters
// (and what was handed to the waiters, in case a message was lost) and
// the status view, in one round trip (a pipeline of scripts). Its failure puts the replica in
// local mode; its success after one brings it back.
func (f *Fleet) beat(ctx context.Context) {
	ttl := f.cfg.ttl.Milliseconds()
	f.mu.Lock()
	budgets := append([]*budget(nil), f.budgets...)
	info := f.infoJSON
	f.mu.Unlock()
	pipe := f.rdb.Pipeline()
	hb := heartbeatScript.Eval(ctx, pipe, []string{f.keys.members, f.keys.info}, f.cfg.id, ttl, info)
	peeks := make([]*redis.Cmd, len(budgets))
	var renews []*redis.Cmd
	sent := time.Now() // after every waiter this beat may call gone was queued
	for i, b := range budgets {
		if mine := b.myLeases(); len(mine) > 0 {
			args := append([]any{ttl}, mine...)
			renews = append(renews, renewScript.Eval(ctx, pipe, b.keys, args...))
		}
		peeks[i] = peekScript.Eval(ctx, pipe, b.keys[:2])
	}
	_, err := pipe.Exec(ctx)
	f.trips[opHeartbeat].Add(1)
	if err != nil {
		f.lost(err)
		return
	}
	// The fallback for lost messages: what was handed to this replica's
	// waiters, or that one is no longer queued.
	for _, r := range renews {
		notes, _ := r.StringSlice()
		for _, n := range notes {
			var note []string
			if json.Unmarshal([]byte(n), &note) == nil && len(note) >= 2 {
				f.deliver(note[0], answer(note[1:]), sent)
			}
		}
	}
	vals, _ := hb.Slice()
	st := Status{Self: f.cfg.id, Redis: true}
	for i := 0; i+1 < len(vals); i += 2 {
		id, _ := vals[i].(string)
		info, _ := vals[i+1].(string)
		m := Member{ID: id, Self: id == f.cfg.id}
		_ = json.Unmarshal([]byte(info), &m.Info)
		st.Members = append(st.Members, m)
	}
	n := max(1, len(st.Members))
	if old := f.n.Swap(int32(n)); int(old) != n {
		for _, b := range budgets {
			b.local.Share(1 / float64(n))
		}
	}
	for i, b := range budgets {
		v, _ := peeks[i].Slice()
		st.Backends = append(st.Backends, b.peek(v))
	}
	f.mu.Lock()
	prev := f.status
	st.Backends = withRates(st.Backends, prev)
	f.status = st
	f.mu.Unlock()
	f.rejoin(n)
}

// lost puts the replica in local mode after a failed command: every
// backend keeps its share (1/N) alone, concurrency included (bookings had
// let it borrow slots).
func (f *Fleet) lost(err error) {
	if !f.local.CompareAndSwap(false, true) {
		return
	}
	n := f.n.Load()
	f.leaves.Add(1)
	f.log.Warn("fleet: Redis unreachable; each backend keeps its local share of every budget until it answers",
		"replicas", n, "share", 1/float64(n), "err", err)
	f.mu.Lock()
	budgets := append([]*budget(nil), f.budgets...)
	f.status.Redis = false
	if f.local.Load() { // not rejoined meanwhile
		select {
		case <-f.down:
		default:
			close(f.down) // the waiters go on their local share
		}
	}
	f.mu.Unlock()
	for _, b := range budgets {
		b.local.Share(1 / float64(n))
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// rejoin takes the replica out of local mode once Redis answers again.
func (f *Fleet) rejoin(n int) {
	f.mu.Lock()
	if !f.local.CompareAndSwap(true, false) {
		f.mu.Unlock()
		return
	}
	select {
	case <-f.down:
		f.down = make(chan struct{})
	default:
	}
	f.mu.Unlock()
	f.log.Info("fleet: Redis reachable again; the fleet's budgets are shared again", "replicas", n)
}

// downCh returns a channel closed when the replica goes to local mode.
func (f *Fleet) downCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

// waiter is a booking that may wait in a queue for a lease.
type waiter struct {
	ch chan answer // the answer handed to it: one, buffered
	// since is when its booking's reply said it was queued (zero before):
	// a heartbeat sent earlier may not have seen it queued.
	since atomic.Int64
}

func (w *waiter) queued() { w.since.Store(time.Now().UnixNano()) }

// await registers member as a possible waiter, before its booking is sent.
func (f *Fleet) await(member string) *waiter {
	w := &waiter{ch: make(chan answer, 1)}
	f.wmu.Lock()
	f.waiters[member] = w
	f.wmu.Unlock()
	return w
}

func (f *Fleet) unwait(member string) {
	f.wmu.Lock()
	delete(f.waiters, member)
	f.wmu.Unlock()
}

// deliver hands a member's answer to its waiter. An answer read by a
// heartbeat (sent: when it was sent) that says the member is gone counts
// only if the member was queued before that heartbeat was sent.
func (f *Fleet) deliver(member string, a answer, sent time.Time) {
	f.wmu.Lock()
	w := f.waiters[member]
	f.wmu.Unlock()
	if w == nil {
		return // booked, given up, or not this replica's: nothing waits
	}
	if a.kind() == "gone" {
		since := w.since.Load()
		if since == 0 || sent.UnixNano() <= since {
			return
		}
	}
	select {
	case w.ch <- a:
	default: // already answered (the message and the heartbeat both)
	}
}

// Local reports whether the replica is in local mode (Redis unreachable).
func (f *Fleet) Local() bool { return f.local.Load() }

// Replicas returns N as last known.
func (f *Fleet) Replicas() int { return int(f.n.Load()) }

// Counters are the fleet's running counts, for tests and benchmarks.
type Counters struct {
	// RoundTrips to Redis made by bookings (acquire; a waiter makes none
	// while it waits), by their ends (release, or a waiter's leaving the
	// queue) and by heartbeats.
	Acquires, Releases, Heartbeats int64
	// Batches booked through Redis.
	Batches int64
	// LocalModes counts the times this replica went to local mode.
	LocalModes int64
}

// Counters returns the running counts.
func (f *Fleet) Counters() Counters {
	return Counters{
		Acquires: f.trips[opAcquire].Load(), Releases: f.trips[opRelease].Load(),
		Heartbeats: f.trips[opHeartbeat].Load(), Batches: f.batches.Load(),
		LocalModes: f.leaves.Load(),
	}
}

// Status is the fleet as this replica saw it at its last heartbeat.
type Status struct {
	Self     string
	Redis    bool // reachable at the last heartbeat; false: local mode
	Members  []Member
	Backends []BackendStatus
}

// Member is one replica.
type Member struct {
	ID   string
	Self bool
	Info map[string]string // what it said of itself (addresses, when it joined)
}

// BackendStatus is one backend's shared budget.
type BackendStatus struct {
	Name string
	// Factor is the adaptive factor on configured rates (1: as configured).
	Factor float64
	// PausedUntil and OpenUntil: a Retry-After, a breaker held open.
	PausedUntil, OpenUntil time.Time
	// RPMLeft and TPMLeft: what the shared buckets hold now (negative:
	// booked ahead); NaN without a budget.
	RPMLeft, TPMLeft float64
	// RPMUsed and TPMUsed: requests and tokens booked per minute over the
	// last heartbeat interval, by the whole fleet.
	RPMUsed, TPMUsed float64
	// Leases held, by replica id.
	Leases map[string]int
	// booked counters and when read, for the rates.
	rs, ts int64
	at     time.Time
}

// Status returns the fleet as last seen.
func (f *Fleet) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.status
	st.Self = f.cfg.id
	st.Redis = !f.local.Load()
	st.Members = append([]Member(nil), st.Members...)
	st.Backends = append([]BackendStatus(nil), st.Backends...)
	return st
}

func withRates(bs []BackendStatus, prev Status) []BackendStatus {
	for i := range bs {
		for _, p := range prev.Backends {
			if p.Name != bs[i].Name || p.at.IsZero() {
				continue
			}
			if d := bs[i].at.Sub(p.at).Minutes(); d > 0 {
				bs[i].RPMUsed = float64(bs[i].rs-p.rs) / d
				bs[i].TPMUsed = float64(bs[i].ts-p.ts) / d
			}
		}
	}
	return bs
}

func parseFloat(v any) (float64, bool) {
	s, ok := v.(string)
	if !ok || s == "" {
		return 0, false
	}
	x, err := strconv.ParseFloat(s, 64)
	return x, err == nil
}
