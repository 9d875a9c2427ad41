package cache

import (
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batcherhq/batcher/batcher"
)

// remote is the Redis layer. Reads are one GET each; writes go through a
// queue to one goroutine that pipelines them.
type remote struct {
	c       *Cache
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	// pausedUntil (Unix ns) is when Redis may be tried again after a
	// failure; 0 while it answers.
	pausedUntil atomic.Int64
	writes      chan write
	stop        chan struct{}
	done        chan struct{}
	stopOnce    sync.Once
}

type write struct {
	key     string
	r       *batcher.Result
	expires time.Time
	st      *routeStats
}

func newRemote(c *Cache, cfg config) *remote {
	rd := &remote{
		c: c, rdb: cfg.rdb, prefix: cfg.prefix + "v" + strconv.Itoa(codecVersion) + ":", timeout: cfg.redisTimeout,
		writes: make(chan write, writeQueue), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go rd.writer()
	return rd
}

// key is k's Redis key: the prefix, the route (for an operator's eyes),
// the Identity in hex (fixed length, and itself naming the route) and the
// tenant.
func (rd *remote) key(k *batcher.CacheKey) string {
	b := make([]byte, 0, len(rd.prefix)+len(k.Route)+2+2*len(k.ID)+len(k.Tenant))
	b = append(b, rd.prefix...)
	b = append(b, k.Route...)
	b = append(b, ':')
	b = hex.AppendEncode(b, k.ID[:])
	b = append(b, ':')
	b = append(b, k.Tenant...)
	return string(b)
}

// up reports whether Redis may be tried now.
func (rd *remote) up() bool {
	p := rd.pausedUntil.Load()
	return p == 0 || rd.c.cfg.clock().UnixNano() >= p
}

// failed books a failure and leaves Redis alone for redisPause.
func (rd *remote) failed(st *routeStats) {
	st.redisErrors.Add(1)
	rd.pausedUntil.Store(rd.c.cfg.clock().Add(redisPause).UnixNano())
}

func (rd *remote) get(ctx context.Context, k *batcher.CacheKey, st *routeStats) (*batcher.Result, time.Time, bool) {
	if !rd.up() {
		return nil, time.Time{}, false
	}
	cctx, cancel := context.WithTimeout(ctx, rd.timeout)
	defer cancel()
	b, err := rd.rdb.Get(cctx, rd.key(k)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		rd.pausedUntil.Store(0)
		return nil, time.Time{}, false
	case err != nil:
		if ctx.Err() == nil { // Redis failed or was slow, not the caller
			rd.failed(st)
		}
		return nil, time.Time{}, false
	}
	rd.pausedUntil.Store(0)
	r, expires, err := decode(b)
	if err != nil || !expires.After(rd.c.cfg.clock()) {
		return nil, time.Time{}, false
	}
	return r, expires, true
}

// put queues r's write; a full queue, or Redis away, drops it.
func (rd *remote) put(k *batcher.CacheKey, r *batcher.Result, expires time.Time, st *routeStats) {
	if !rd.up() {
		st.dropped.Add(1)
		return
	}
	select {
	case rd.writes <- write{key: rd.key(k), r: r, expires: expires, st: st}:
	default:
		st.dropped.Add(1)
	}
}

// writeBatch is the most writes one pipeline carries.
const writeBatch = 128

// writer writes queued answers to Redis, many to a pipeline, until close;
// then it writes what is queued and returns.
func (rd *remote) writer() {
	defer close(rd.done)
	batch := make([]write, 0, writeBatch)
	for {
		select {
		case w := <-rd.writes:
			batch = append(batch[:0], w)
		case <-rd.stop:
			for {
				batch = batch[:0]
				for len(batch) < writeBatch {
					select {
					case w := <-rd.writes:
						batch = append(batch, w)
						continue
					default:
					}
					break
				}
				if len(batch) == 0 {
					return
				}
				rd.flush(batch)
			}
		}
	more:
		for len(batch) < writeBatch {
			select {
			case w := <-rd.writes:
				batch = append(batch, w)
			default:
				break more
			}
		}
		rd.flush(batch)
	}
}

// flush writes batch in one pipeline.
func (rd *remote) flush(batch []write) {
	if !rd.up() {
		for _, w := range batch {
			w.st.dropped.Add(1)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), rd.timeout)
	defer cancel()
	pipe := rd.rdb.Pipeline()
	now := rd.c.cfg.clock()
	n := 0
	for _, w := range batch {
		ttl := w.expires.Sub(now)
		if ttl < time.Millisecond {
			continue
		}
		v, err := encode(w.r, w.expires)
		if err != nil {
			w.st.dropped.Add(1)
			continue
		}
		pipe.Set(ctx, w.key, v, ttl)
		n++
	}
	if n == 0 {
		return
	}
	if _, err := pipe.Exec(ctx); err != nil {
		rd.failed(batch[0].st)
	}
}

// close stops the writer once it has written what is queued, or when ctx
// ends.
func (rd *remote) close(ctx context.Context) error {
	rd.stopOnce.Do(func() { close(rd.stop) })
	select {
	case <-rd.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
