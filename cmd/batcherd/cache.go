package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.opentelemetry.io/otel/metric"

	"github.com/batcherhq/batcher/cache"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/telemetry"
)

// openCache opens the response cache, or returns nil when it is off: in
// memory, with the fleet's Redis behind it when a fleet is configured
// (unless cache.local_only). Redis unreachable is not an error: the cache
// misses there until it answers. close writes what the cache still owes
// Redis and closes its client; call it after the core has drained.
func openCache(cfg *config.Config, mp metric.MeterProvider, log *slog.Logger) (c *cache.Cache, close func(), err error) {
	if cfg.Cache.Off {
		return nil, func() {}, nil
	}
	var rdb *redis.Client
	opts := append(cfg.Cache.Options(), cache.WithMeterProvider(mp))
	if cfg.Fleet.RedisURL != "" && !cfg.Cache.LocalOnly {
		o, err := redis.ParseURL(cfg.Fleet.RedisURL)
		if err != nil {
			return nil, nil, fmt.Errorf("redis url: %w", err)
		}
		t := cfg.Fleet.Timeout.D()
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = t, t, t, t
		o.MaxRetries = -1 // a failure is a miss at once
		o.ContextTimeoutEnabled = true
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		rdb = redis.NewClient(o)
		opts = append(opts, cache.WithRedis(rdb), cache.WithRedisTimeout(t),
			cache.WithRedisPrefix(cfg.Fleet.Prefix+":cache:"))
	}
	if c, err = cache.New(opts...); err != nil {
		if rdb != nil {
			_ = rdb.Close()
		}
		return nil, nil, err
	}
	return c, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			log.Warn("closing the response cache", "err", err)
		}
		if rdb != nil {
			_ = rdb.Close()
		}
	}, nil
}

// cacheSource turns the cache's counts into the live views' figures.
func cacheSource(c *cache.Cache) func() []telemetry.CacheRoute {
	return func() []telemetry.CacheRoute {
		var out []telemetry.CacheRoute
		for _, s := range c.Stats() {
			out = append(out, telemetry.CacheRoute{
				Route: s.Route, HitRatio: s.HitRatio(), Hits: s.Hits[0], Misses: s.Misses[0],
				RedisHits: s.Hits[1], RedisMisses: s.Misses[1], Evictions: s.Evictions, Bytes: s.Bytes,
			})
		}
		return out
	}
}
