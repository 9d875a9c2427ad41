package fleet

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/batcherhq/batcher/fleet"

// metrics are the fleet's instruments: made once, recorded without
// allocating. A nil *metrics records nothing.
type metrics struct {
	acquire metric.Float64Histogram
	reg     metric.Registration
}

func newMetrics(mp metric.MeterProvider, f *Fleet) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	mt := mp.Meter(meterName)
	acquire, err1 := mt.Float64Histogram("batcher.fleet.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("One booking's round trip to Redis (a batch's added latency when it need not wait)."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1, 0.3))
	up, err2 := mt.Int64ObservableGauge("batcher.fleet.redis.up", metric.WithUnit("1"),
		metric.WithDescription("1 while Redis answers; 0 in local mode, where each backend keeps 1/N of every budget."))
	replicas, err3 := mt.Int64ObservableGauge("batcher.fleet.replicas", metric.WithUnit("{replica}"),
		metric.WithDescription("Replicas in the fleet, as last known."))
	trips, err4 := mt.Int64ObservableCounter("batcher.fleet.round_trips", metric.WithUnit("{round_trip}"),
		metric.WithDescription("Round trips to Redis by operation (acquire, release, heartbeat)."))
	locals, err5 := mt.Int64ObservableCounter("batcher.fleet.local_modes", metric.WithUnit("{transition}"),
		metric.WithDescription("Times this replica lost Redis and went to its local share."))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, err
	}
	opKey := attribute.Key("batcher.fleet.op")
	ops := [numOps]metric.ObserveOption{
		metric.WithAttributes(opKey.String("acquire")),
		metric.WithAttributes(opKey.String("release")),
		metric.WithAttributes(opKey.String("heartbeat")),
	}
	reg, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(1)
		if f.local.Load() {
			v = 0
		}
		o.ObserveInt64(up, v)
		o.ObserveInt64(replicas, int64(f.n.Load()))
		for i := range ops {
			o.ObserveInt64(trips, f.trips[i].Load(), ops[i])
		}
		o.ObserveInt64(locals, f.leaves.Load())
		return nil
	}, up, replicas, trips, locals)
	if err != nil {
		return nil, err
	}
	return &metrics{acquire: acquire, reg: reg}, nil
}

func (m *metrics) acquired(d time.Duration) {
	if m == nil {
		return
	}
	m.acquire.Record(context.Background(), d.Seconds())
}

func (m *metrics) unregister() {
	if m != nil && m.reg != nil {
		_ = m.reg.Unregister()
	}
}
