// Package sim is Batcher's embedded simulated LLM provider: a
// batcher.Backend that needs no API key and behaves like a real provider
// closely enough to exercise batching, rate limits and retries.
//
// Guarantees:
//   - Outputs are deterministic. A chat or completion text is derived from
//     the model, the input and the sampling parameters (it echoes the start of
//     the prompt, then hashed words); max_tokens only truncates it, and a stop
//     sequence cuts it. An embedding is a unit vector derived by hashing the
//     model and the text.
//   - Chat routes honour tools, response formats, images, names, n and
//     logprobs (Features; chat.go): a request whose tool_choice names a
//     function, or whose last user message names a tool, gets a call of
//     it with arguments generated from its parameters' schema; json_object
//     gets a JSON object and json_schema JSON generated from the schema and
//     checked against it with a JSON Schema validator
//     (santhosh-tekuri/jsonschema). What it could only ignore (penalties,
//     logit_bias, reasoning_effort, user, extra body fields) it does not
//     declare, so the core refuses it by name.
//   - Latency is BaseLatency plus PerToken for each generated token. A native
//     batch is one call: it takes the latency of its longest output.
//   - With FanOut, a batch becomes one concurrent call per input, each
//     counting as a request against the limits, the way a provider without a
//     batch endpoint sees a client that fans out.
//   - Limits answer like a real provider: beyond MaxConcurrency calls in
//     flight, or beyond the RPM or TPM budget, a call fails at once with a
//     *batcher.UpstreamError of class ClassRateLimit, HTTP 429 and a
//     RateLimitInfo whose RetryAfter says when to try again. A native batch
//     counts as one request and the sum of its tokens.
//   - Failure injection draws from a RNG seeded by Config.Seed: the same
//     sequence of calls meets the same failures.
//   - Every wait honours its context and returns promptly when it ends; the
//     provider never retains a batch after Dispatch returns.
//
// A Provider is safe for concurrent use. Its counters (Stats) are atomic.
package sim
