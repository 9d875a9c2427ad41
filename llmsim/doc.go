// Package llmsim is an OpenAI-compatible (and Anthropic-compatible) model server that people and tests
// can run: it answers /v1/chat/completions, /v1/completions, /v1/embeddings
// and /v1/models with deterministic output and realistic usage.
//
// Knobs (Config) shape it like a real provider: a latency model (a base
// plus per-token costs), a concurrency bound, RPM and TPM limits enforced as
// providers do (429 with Retry-After and x-ratelimit-* headers, which also
// come on every answer), and faults injected from a seeded random source:
// 5xx errors, calls that hang until the client gives up, connection resets
// and malformed bodies. Packed chat prompts (package backend/openai/pack)
// are answered item by item, correctly or, with the Pack* knobs, with
// missing, malformed or unparseable answers. A chat call with tools whose
// tool_choice names one (or is required, or whose last user message names
// one) gets a tool call with arguments generated from the tool's schema;
// json_object and json_schema calls get JSON (an instance of the schema;
// a schema that is not a valid JSON Schema is refused, 400 naming
// response_format.json_schema.schema, as OpenAI refuses it);
// ToolCallMalformedRate and SchemaViolationRate break them (tools.go).
// A streamed tool call on the OpenAI endpoints comes as OpenAI's
// tool-call chunks (stream.go).
//
// It also answers Anthropic's Messages API, POST /v1/messages
// (anthropic.go), with the same text, tool calls, limits and faults in
// Anthropic's shapes: x-api-key and anthropic-version headers, content
// blocks, tool_use and tool_result checked as Anthropic checks them, stop
// sequences, anthropic-ratelimit-* headers, 429 rate_limit_error with
// retry-after, 500 api_error and 529 overloaded_error faults, and the
// streamed events (message_start ... message_stop, tool input as
// input_json_delta), and its Message Batches, /v1/messages/batches
// (anthropic_batches.go): create, get, results as JSON lines, cancel.
//
// OpenAI's Batch API is served too (batchapi.go): /v1/files (purpose
// batch) and /v1/batches, with a processing time (BatchTime), a fraction of
// failed and of expired lines, OpenAI's file limits (50,000 requests and
// 200 MB) and an enqueued-token limit; BatchStats counts uploads and
// creations, by file name and by metadata, so that tests can see a file
// uploaded or a batch created twice. HoldBatch holds a batch (of either
// API) in progress until a test lets it go on.
//
// Guarantees:
//   - output depends only on the input: Reply and Embedding say what any
//     prompt or text gets, and a packed item gets the same answer as the
//     same prompt sent alone;
//   - usage counts tokens as Tokens does (about four bytes a token);
//   - with every fault rate at zero and no limits, every well-formed request
//     succeeds; bad requests get OpenAI-shaped errors (400, 401, 404);
//   - Close releases every call held by a latency wait or a hang fault.
//
// cmd/llmsim serves it on a port; tests run New's Server in-process on a
// loopback listener.
//
// # Files
//
// server.go (Server, New, Stats), config.go (Config and its defaults),
// serve.go (what every call goes through: the key, decoding, the model,
// then the limits, a concurrency slot, the fault draw and the latency
// model), limits.go (RPM and TPM, the 429s),
// faults.go (injected errors, hangs, resets and malformed bodies),
// errors.go (OpenAI's error bodies). The OpenAI endpoints: chat.go,
// completions.go, embeddings.go, models.go, stream.go (server-sent
// events), packed.go (packed prompts), tools.go (tool calls and JSON
// output), wire.go (the request and response shapes), text.go (the
// deterministic text, tokens and embeddings). Anthropic's Messages API:
// anthropic.go (the endpoint, its checks and answer), anthropic_wire.go
// (its shapes), anthropic_stream.go (its events), anthropic_errors.go (its
// errors, faults and rate-limit headers), anthropic_batches.go (Message
// Batches). OpenAI's Batch API: batchapi.go (batches, their checks and
// BatchStats), batchapi_files.go (/v1/files), batchapi_run.go (a batch's
// progress and its output and error files).
package llmsim
