// Package openaiapi is Batcher's OpenAI-compatible HTTP front door: any
// OpenAI SDK pointed at it gets batching, budgets, priorities, retries,
// fallbacks and dedup without a change to its calls.
//
// It serves POST /v1/chat/completions (with stream: true as Server-Sent
// Events ending in [DONE]; until the core streams tokens, the whole answer
// comes in one content chunk), POST /v1/completions, POST /v1/embeddings,
// GET /v1/models (the configured routes), POST /v1/files (JSONL, purpose
// batch), GET /v1/files (the caller's files, paged as OpenAI pages them:
// purpose, limit, order, after) with GET and DELETE /v1/files/{id} and GET
// /v1/files/{id}/content. The batch
// API (/v1/batches) is NewBatches over a store of durable jobs (BatchJobs;
// batcherd adapts jobs.Manager), mounted with WithBatches.
//
// Guarantees:
//   - every call goes through the core as one batcher.Request per input: an
//     embeddings input array or a completions prompt array is split into
//     requests that batch with other callers' and is reassembled in order;
//     when one item fails, the others are cancelled and the error names the
//     item (param "input[3]");
//   - priority comes from service_tier (priority HIGH, default and auto
//     NORMAL, flex LOW) or the X-Batcher-Priority header; the deadline from
//     X-Stainless-Timeout (the SDKs' own) or X-Batcher-Timeout, the shorter
//     winning, else WithDefaultTimeout, else the core's queue timeout;
//   - errors come in OpenAI's shape and statuses: 400 naming the param for
//     bad input (malformed JSON names its line, column and byte), 401 for a
//     missing or wrong token, 404 for an unknown model, file or URL, 413 past
//     the body limit, 429 with Retry-After for a full queue, an exhausted
//     budget or the lane cap (too_many_lanes), 503 once the core's admission has closed, and upstream
//     failures by class (429, 400, 502, 504), never passed through;
//   - nothing a caller sends is dropped. Chat carries tools, tool_choice,
//     parallel_tool_calls, tool calls and tool messages, response_format
//     (json_object, json_schema), image_url content parts, names, n,
//     logprobs, top_logprobs, the penalties, logit_bias, user and
//     reasoning_effort, and answers with tool_calls, refusal and logprobs
//     in OpenAI's shape. An unknown top-level chat field is forwarded as
//     an extra body field (batcher.Request.Chat.Extra) to backends that forward
//     them (OpenAI-compatible upstreams), and is a 400 naming it elsewhere:
//     forwarding keeps new provider fields usable without a Batcher
//     release, refusing where they cannot go keeps them from vanishing.
//     Whatever the model's backend cannot honour is a 400 naming the field
//     (the core checks what each backend declares; n > 1 it refuses on
//     completion routes). On completions and embeddings, fields whose
//     value would change the answer's meaning and that Batcher cannot
//     serve (token-id inputs, suffix) are refused by name, and so are
//     fields they do not read. Metadata is held to OpenAI's 16 pairs
//     (MaxMetadata);
//   - a batch job's lines are read by their endpoint's decoder (ChatBody,
//     CompletionBody, EmbeddingBody), and chat answers written by the same
//     renderer (ChatCompletionBody), so a line carries, and its output
//     line answers, what this door does;
//   - each request carries its HTTP connection (its remote address: one
//     per keep-alive or HTTP/2 connection) as batcher.Request.Conn, so the
//     lane cap's fair share holds per connection within a tenant, as on
//     the gRPC doors;
//   - bearer tokens are compared in constant time and never logged;
//   - with a tracer provider, every call is an otelhttp server span that
//     continues the caller's traceparent and parents the core's request
//     span, which links to the batch span that reaches the provider.
//
// The package imports the core, never gRPC or the generated code.
package openaiapi
