// Command batcherd runs the Batcher gRPC service.
//
// It reads its configuration from defaults, an optional YAML file
// (--config or BATCHER_CONFIG), BATCHER_* environment variables and flags,
// each overriding the last (see package config and batcherd -h). With no
// configuration at all it serves the embedded simulated provider on
// 127.0.0.1:50051: routes sim-chat, sim-completion and sim-embed. A backend
// of type openai sends routes to an OpenAI-compatible HTTP API, one of type
// anthropic chat routes to Anthropic's Messages API; llmsim.example.yaml points one at a local llmsim (cmd/llmsim), and
// batcherd.example.yaml documents every setting.
//
// It also serves the OpenAI HTTP API (package openaiapi) on --http-listen,
// default 127.0.0.1:8081 ("off" turns it off): chat, completions,
// embeddings, models and, with --data-dir, files. Without bearer tokens
// (http.tokens_env, http.tokens_file) it serves loopback only; it logs
// "http listening" with the bound address before "listening".
//
// It logs through log/slog, as JSON or text on stderr. Once it listens it
// logs "listening" with the bound address (useful with port 0), then each
// route and backend. It exports traces over OTLP/gRPC only when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set;
// otherwise it records no spans at all.
//
// On SIGTERM or SIGINT it shuts down gracefully within drain_timeout, in
// order: health checks answer NOT_SERVING, admission stops (the HTTP API
// answers 503 from then on), the batcher drains (every accepted request
// gets its result), open streams end, the HTTP listener closes once its
// calls are answered, and the gRPC server stops (forcibly if the drain
// timeout has passed). It then
// closes its backends (an openai backend's idle connections), flushes its
// traces and exits 0. A second signal during shutdown kills it
// at once.
//
// Exit codes: 0 after a graceful shutdown (or -h), 1 when it could not
// serve, 2 for a bad configuration; the message names the field at fault.
package main
