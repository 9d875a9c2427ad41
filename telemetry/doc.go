// Package telemetry sets up batcherd's OpenTelemetry providers and live
// views.
//
//   - Setup builds a MeterProvider that always feeds a Prometheus registry
//     (served at /metrics on the admin listener) and, when the standard
//     OTEL_* variables ask, an OTLP exporter (grpc or http/protobuf) or the
//     console, plus a TracerProvider (contrib autoexport) when traces are
//     asked for. Every reader takes the core's MetricsProducer
//     (Telemetry.CoreOptions).
//   - NewLogHandler wraps a slog.Handler so that every record logged with a
//     context holding a span carries trace_id and span_id.
//   - Sampler turns the core's Lanes and Stats, the server's streams and
//     (once they exist) jobs into one Snapshot every interval, with rates
//     and latencies taken from the metrics, for the status page and
//     WatchStats alike.
//
// Guarantees: every metric attribute value comes from configuration or a
// small fixed set (see batcher/metrics.go); nothing here blocks the core's
// hot path: the sampler and the observable instruments read snapshots when
// a reader collects.
//
// Files: setup.go (Setup, the providers), metrics.go (RegisterLive: the
// streams' and jobs' instruments), log.go (NewLogHandler), sampler.go
// (Sampler, its Sources and history), snapshot.go (Snapshot and the JSON
// a dashboard reads), rates.go (rates, budgets and latency quantiles from
// the metrics).
package telemetry
