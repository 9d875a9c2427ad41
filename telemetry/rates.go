package telemetry

import (
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// readMetrics fills the request counts and the cumulative values rates
// derive from, from the Prometheus families of the core's instruments.
func (s *Sampler) readMetrics(snap *Snapshot, raw *rawSample) {
	fams, err := s.src.Metrics.Gather()
	if err != nil && len(fams) == 0 {
		return
	}
	for _, f := range fams {
		switch f.GetName() {
		case "batcher_requests_admitted_total":
			snap.Requests.Admitted = sumCounter(f)
		case "batcher_requests_rejected_total":
			snap.Requests.Rejected = sumCounter(f)
		case "batcher_requests_completed_total":
			for _, m := range f.GetMetric() {
				if label(m, "batcher_outcome") == "ok" {
					snap.Requests.Completed += int64(m.GetCounter().GetValue())
				} else {
					snap.Requests.Failed += int64(m.GetCounter().GetValue())
				}
			}
			raw.completed = snap.Requests.Completed + snap.Requests.Failed
		case "batcher_request_duration_seconds":
			for _, m := range f.GetMetric() {
				h := m.GetHistogram()
				bs := h.GetBucket()
				if raw.latency == nil {
					raw.bounds = make([]float64, len(bs))
					for i, b := range bs {
						raw.bounds[i] = b.GetUpperBound()
					}
					raw.latency = make([]uint64, len(bs)+1) // and +Inf
				}
				if len(bs)+1 != len(raw.latency) {
					continue
				}
				var prev uint64
				for i, b := range bs {
					raw.latency[i] += b.GetCumulativeCount() - prev
					prev = b.GetCumulativeCount()
				}
				raw.latency[len(bs)] += h.GetSampleCount() - prev
			}
		case "gen_ai_client_token_usage":
			for _, m := range f.GetMetric() {
				raw.tokens += int64(m.GetHistogram().GetSampleSum())
			}
		case "batcher_upstream_batch_api_batches_total":
			byBackend(snap, f, func(be *Backend, n int64) { be.BatchAPIBatches = n })
		case "batcher_upstream_batch_api_requests_total":
			byBackend(snap, f, func(be *Backend, n int64) { be.BatchAPIRequests = n })
		case "batcher_budget_requests_used_total":
			perBackend(f, raw.budgetReqs)
		case "batcher_budget_tokens_used_total":
			perBackend(f, raw.budgetToks)
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func sumCounter(f *dto.MetricFamily) int64 {
	var n float64
	for _, m := range f.GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return int64(n)
}

func perBackend(f *dto.MetricFamily, into map[string]int64) {
	for _, m := range f.GetMetric() {
		into[label(m, "batcher_backend")] += int64(m.GetCounter().GetValue())
	}
}

// byBackend sums counter f by backend and sets each of snap's backends'
// sum with set.
func byBackend(snap *Snapshot, f *dto.MetricFamily, set func(*Backend, int64)) {
	by := map[string]int64{}
	perBackend(f, by)
	for i := range snap.Backends {
		set(&snap.Backends[i], by[snap.Backends[i].Name])
	}
}

// derive fills snap's rates from raw against the samples kept: the last
// interval for request rates and latency, the last minute for budgets and
// jobs. Called with mu held.
func (s *Sampler) derive(snap *Snapshot, raw *rawSample) {
	if len(s.raw) == 0 {
		return
	}
	prev := s.raw[len(s.raw)-1]
	if el := raw.t.Sub(prev.t).Seconds(); el > 0 {
		snap.Requests.PerSec = float64(raw.completed-prev.completed) / el
		snap.Requests.TokensPerSec = float64(raw.tokens-prev.tokens) / el
	}
	if len(raw.latency) > 0 && (prev.latency == nil || len(prev.latency) == len(raw.latency)) {
		delta := make([]uint64, len(raw.latency))
		for i := range delta {
			delta[i] = raw.latency[i]
			if prev.latency != nil {
				delta[i] -= prev.latency[i]
			}
		}
		snap.Requests.P50 = quantile(raw.bounds, delta, 0.50)
		snap.Requests.P95 = quantile(raw.bounds, delta, 0.95)
		snap.Requests.P99 = quantile(raw.bounds, delta, 0.99)
	}
	// A minute back, or the oldest sample.
	old := s.raw[0]
	for i := len(s.raw) - 1; i >= 0; i-- {
		if raw.t.Sub(s.raw[i].t) >= time.Minute {
			old = s.raw[i]
			break
		}
	}
	if el := raw.t.Sub(old.t); el > 0 {
		perMin := time.Minute.Seconds() / el.Seconds()
		for i := range snap.Backends {
			be := &snap.Backends[i]
			be.RPMUsed = float64(raw.budgetReqs[be.Name]-old.budgetReqs[be.Name]) * perMin
			be.TPMUsed = float64(raw.budgetToks[be.Name]-old.budgetToks[be.Name]) * perMin
		}
		for i := range snap.Jobs {
			j := &snap.Jobs[i]
			if j.ItemsPerSec > 0 || j.ETA > 0 {
				continue // the source's own figures (batcherd: GetJob's)
			}
			if oldDone, ok := old.jobDone[j.ID]; ok {
				j.ItemsPerSec = float64(raw.jobDone[j.ID]-oldDone) / el.Seconds()
				j.TokensPerSec = float64(raw.jobTokens[j.ID]-old.jobTokens[j.ID]) / el.Seconds()
			}
			if left := j.Total - j.Done(); left > 0 && j.ItemsPerSec > 0 {
				j.ETA = time.Duration(float64(left) / j.ItemsPerSec * float64(time.Second))
			}
		}
	}
}

// quantile estimates the q quantile of a histogram's bucket counts, by
// linear interpolation inside the bucket it falls in (as Prometheus'
// histogram_quantile does). 0 when the histogram is empty.
func quantile(bounds []float64, counts []uint64, q float64) time.Duration {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var cum float64
	for i, c := range counts {
		if cum+float64(c) < rank || c == 0 {
			cum += float64(c)
			continue
		}
		lo := 0.0
		if i > 0 {
			lo = bounds[i-1]
		}
		if i >= len(bounds) { // the +Inf bucket: its lower bound
			return seconds(lo)
		}
		hi := bounds[i]
		return seconds(lo + (hi-lo)*(rank-cum)/float64(c))
	}
	return seconds(bounds[len(bounds)-1])
}

func seconds(s float64) time.Duration {
	if s > math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}
