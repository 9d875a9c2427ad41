package jobs

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// batchAPIMetric is batcher_upstream_batch_api_{batches,requests}_total:
// the batches jobs created through a provider's batch API and the requests
// (tasks) they carried, by backend and route. It is the batch API's side
// of the core's batcher_upstream_{calls,requests}_total, which count the
// online calls only; the live views (telemetry.Backend) read both. A batch
// counts when this process's create call returns it: one a restart finds
// created already counted in the process that created it.
type batchAPIMetric struct {
	batches, requests metric.Int64Counter
}

func newBatchAPIMetric(mp metric.MeterProvider) (*batchAPIMetric, error) {
	if mp == nil {
		return nil, nil
	}
	mt := mp.Meter(meterName)
	batches, err1 := mt.Int64Counter("batcher.upstream.batch_api.batches", metric.WithUnit("{batch}"),
		metric.WithDescription("Upstream batches jobs created through a provider's batch API, by backend and route."))
	requests, err2 := mt.Int64Counter("batcher.upstream.batch_api.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests (job tasks) carried by the upstream batches jobs created through a provider's batch API, by backend and route."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &batchAPIMetric{batches: batches, requests: requests}, nil
}

// created counts one upstream batch of n requests on backend for route.
func (m *batchAPIMetric) created(backend, route string, n int) {
	if m == nil {
		return
	}
	attrs := metric.WithAttributes(keyBackend.String(backend), keyRoute.String(route))
	m.batches.Add(context.Background(), 1, attrs)
	m.requests.Add(context.Background(), int64(n), attrs)
}
