package cache

import "sync/atomic"

// The layers, as indexes and metric labels.
const (
	layerLocal = 0
	layerRedis = 1
)

var layerNames = [2]string{"local", "redis"}

// routeStats are one route's counts, kept by the cache and observed at
// collection.
type routeStats struct {
	route        string
	hits, misses [2]atomic.Int64
	evictions    atomic.Int64
	bytes        atomic.Int64
	redisErrors  atomic.Int64
	dropped      atomic.Int64 // Redis writes dropped: the queue was full or Redis away
}

func (s *routeStats) snapshot() RouteStats {
	return RouteStats{
		Route:       s.route,
		Hits:        [2]int64{s.hits[0].Load(), s.hits[1].Load()},
		Misses:      [2]int64{s.misses[0].Load(), s.misses[1].Load()},
		Evictions:   s.evictions.Load(),
		Bytes:       s.bytes.Load(),
		RedisErrors: s.redisErrors.Load(),
	}
}
