package cache

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the cache's metrics.
const meterName = "github.com/batcherhq/batcher/cache"

// The attributes of the cache's series: the route under the key every
// other series of Batcher's gives it (batcher_route in Prometheus), so that
// a query can join them, and the layer, local or redis.
const (
	keyRoute = attribute.Key("batcher.route")
	keyLayer = attribute.Key("batcher.cache.layer")
)

// metrics observes the routes' counts at collection: the hot path only
// adds to atomics.
type metrics struct {
	reg metric.Registration
}

func newMetrics(mp metric.MeterProvider, c *Cache) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	mt := mp.Meter(meterName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		ctr, err := mt.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return ctr
	}
	hits := counter("batcher.cache.hits", "{request}", "Lookups answered from the response cache, by route and layer.")
	misses := counter("batcher.cache.misses", "{request}", "Lookups the response cache could not answer, by route and layer.")
	evictions := counter("batcher.cache.evictions", "{entry}", "Entries evicted from memory for size or age, by route.")
	redisErrors := counter("batcher.cache.redis.errors", "{error}", "Redis commands that failed or timed out (each a miss), by route.")
	dropped := counter("batcher.cache.redis.dropped", "{entry}", "Answers not written to Redis: its queue was full or it was away, by route.")
	bytes, err := mt.Int64ObservableGauge("batcher.cache.bytes", metric.WithUnit("By"), metric.WithDescription("Bytes the cache holds in memory, by route."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	reg, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.stats.Range(func(_, v any) bool {
			s := v.(*routeStats)
			route := keyRoute.String(s.route)
			for l, name := range layerNames {
				at := metric.WithAttributes(route, keyLayer.String(name))
				if l == layerRedis && c.rd == nil {
					continue
				}
				o.ObserveInt64(hits, s.hits[l].Load(), at)
				o.ObserveInt64(misses, s.misses[l].Load(), at)
			}
			local := metric.WithAttributes(route, keyLayer.String(layerNames[layerLocal]))
			o.ObserveInt64(evictions, s.evictions.Load(), local)
			o.ObserveInt64(bytes, s.bytes.Load(), local)
			if c.rd != nil {
				redis := metric.WithAttributes(route, keyLayer.String(layerNames[layerRedis]))
				o.ObserveInt64(redisErrors, s.redisErrors.Load(), redis)
				o.ObserveInt64(dropped, s.dropped.Load(), redis)
			}
			return true
		})
		return nil
	}, hits, misses, evictions, redisErrors, dropped, bytes)
	if err != nil {
		return nil, err
	}
	return &metrics{reg: reg}, nil
}

func (m *metrics) close() { _ = m.reg.Unregister() }
