// Package anthropic is Batcher's backend for Anthropic's Messages API
// (POST /v1/messages).
//
// A Backend sends each request of a chat batch as its own call (a
// fan-out of at most MaxFanOut at once: the Messages API takes one
// conversation a call, and Batcher packs no prompts for it), mapping the
// core's chat surface onto Anthropic's:
//   - system and developer messages become the top-level system prompt;
//   - content parts become text and image blocks (a data URL as a base64
//     source, an http(s) URL as a url source);
//   - tools become tools with an input_schema; tool_choice auto, required,
//     a named function and none become auto, any, tool and none, and
//     parallel_tool_calls false disable_parallel_tool_use; an assistant
//     message's tool calls become tool_use blocks and tool messages
//     tool_result blocks, consecutive turns of one role merged into one;
//   - stop sequences, temperature and top_p go as they are; the user as
//     metadata.user_id; extra body fields (top_k, thinking, ...) are
//     spliced in verbatim;
//   - max_tokens, which Anthropic requires, is the request's, else its
//     route's default_max_tokens (Batch.MaxTokens), else Config.MaxTokens.
//
// What the Messages API cannot carry is refused, never dropped: the
// backend declares its features (Features: tools, images, user, extra
// body), so the core refuses response_format, message names, logprobs,
// n > 1, penalties, logit_bias and reasoning_effort naming the field; a
// seed, which every other backend takes, fails the request as an invalid
// request naming params.seed.
//
// Answers: text blocks are joined into the text, tool_use blocks become
// tool calls (checked against the request's tools, and a strict tool's
// schema), the stop reason maps to the core's finish reason (end_turn and
// stop_sequence: stop; max_tokens: length; tool_use: tool calls; refusal:
// content filter), and usage counts every input token, cached or not.
// Streamed requests (Streamer) read Anthropic's events: message_start,
// content_block_start and _delta (text_delta, input_json_delta),
// message_delta (stop reason and output tokens), message_stop; ping is
// skipped and an error event fails the call as a server error.
//
// Failures are *batcher.UpstreamError: 429 a rate limit and 529
// (overloaded) and 5xx server errors, both retried by the core after
// retry-after; other 4xx invalid requests carrying Anthropic's own
// message, redacted and cut short; 401 and 403 auth errors without it.
// Every answer's anthropic-ratelimit-* headers (requests and tokens:
// limit, remaining, reset) feed the core's adaptive limits through
// // Batch.RateLimit and Config.OnRateLimit, as x-ratelimit-* do for
// backend/openai.
//
// Message Batches (batches.go), half price within 24 hours:
// EncodeBatchRequest writes a request as a {custom_id, params} line (the
// same mapping, the same refusals), CreateBatch streams such lines into
// one POST /v1/messages/batches (Anthropic has no file API; at most
// BatchMaxRequests requests and BatchMaxBytes), GetBatch polls,
// BatchResults streams an ended batch's JSON-lines results back by custom
// id (succeeded: the answer as Dispatch reads it; errored: the error the
// online call would have got; canceled and expired: errors saying so), and
// CancelBatch cancels. Backend.Batches is the same as a
// batchapi.Upstream (no file API: Create takes the lines itself; no
// metadata: Find is unsupported), for the jobs' batch dispatch.
package anthropic
