package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/batcherhq/batcher/telemetry"

// RegisterLive registers the instruments of the figures outside the core:
// the server's streams (batcher.streams.open, batcher.streams.buffered)
// and the jobs (batcher.jobs by state, batcher.job.items and
// batcher.job.tokens: cumulative over the jobs src.Jobs lists, the newest
// ones in batcherd). Their help texts say what they count in words: an
// OTel instrument's dotted name is not what a Prometheus reader sees
// (batcher.job.tasks is batcher_job_tasks_total there). Sources that are
// nil are not observed. Jobs' ids are never attribute values.
//
// batcher.jobs has one series per state in src.JobStates, zero when no job
// is in it, so that series do not vanish; a job in a state outside the list
// is not counted there (the attribute set stays bounded).
func RegisterLive(mp metric.MeterProvider, src Sources) (metric.Registration, error) {
	mt := mp.Meter(meterName)
	open, err1 := mt.Int64ObservableGauge("batcher.streams.open", metric.WithUnit("{stream}"), metric.WithDescription("Open SubmitStreams."))
	buffered, err2 := mt.Int64ObservableGauge("batcher.streams.buffered", metric.WithUnit("{message}"), metric.WithDescription("Messages the open streams hold for sending."))
	jobs, err3 := mt.Int64ObservableGauge("batcher.jobs", metric.WithUnit("{job}"), metric.WithDescription("Jobs by state, of the newest jobs still stored."))
	items, err4 := mt.Int64ObservableGauge("batcher.job.items", metric.WithUnit("{item}"), metric.WithDescription("Items ended (succeeded, failed, cancelled or expired) in the newest jobs still stored. A gauge: it falls when a job is deleted or is no longer among the newest; for a rate, use the counter of the jobs' tasks ended."))
	tokens, err5 := mt.Int64ObservableGauge("batcher.job.tokens", metric.WithUnit("{token}"), metric.WithDescription("Tokens (input and output) used by the newest jobs still stored. A gauge: it falls when a job is deleted or is no longer among the newest; for a rate, use the counter of the jobs' task tokens."))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, err
	}
	stateKey := attribute.Key("batcher.job.state")
	return mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if src.Streams != nil {
			st := src.Streams()
			o.ObserveInt64(open, int64(st.Open))
			o.ObserveInt64(buffered, int64(st.Buffered))
		}
		if src.Jobs != nil {
			by := map[string]int64{}
			var n, tok int64
			for _, j := range src.Jobs() {
				by[j.State]++
				n += j.Done()
				tok += j.Tokens
			}
			for _, s := range src.JobStates {
				o.ObserveInt64(jobs, by[s], metric.WithAttributes(stateKey.String(s)))
			}
			o.ObserveInt64(items, n)
			o.ObserveInt64(tokens, tok)
		}
		return nil
	}, open, buffered, jobs, items, tokens)
}
