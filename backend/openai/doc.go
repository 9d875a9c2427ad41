// Package openai is Batcher's backend for OpenAI-compatible upstreams:
// OpenAI itself, Azure OpenAI, vLLM, Ollama, llama.cpp's server, LM Studio,
// Together, Groq, OpenRouter and the many others that speak the same HTTP
// API.
//
// A Backend sends each batch the cheapest way its operation allows:
//   - embeddings as one /embeddings call whose input array carries every
//     request, routed back by data[].index;
//   - completions as one /completions call whose prompt array carries every
//     request, routed back by choices[].index;
//   - chat as one /chat/completions call per request, at most MaxFanOut at
//     once, or, on routes that opt in (PackConfig), several short requests
//     packed into one call whose JSON reply (package pack) is routed back.
//     A request with tools, a response format, images or any parameter
//     beyond the plain five never packs: it goes as its own call, with all
//     of it mapped to OpenAI's fields, provider-specific extra fields
//     spliced in verbatim, and its tool calls, refusal, logprobs and n
//     choices read back (richchat.go). An answer that breaks what the
//     request asked (a call of a tool it did not offer, arguments that are
//     not JSON, or a strict schema broken) is an invalid_response;
//   - streamed chat and completions (stream.go): content, refusal and
//     tool-call pieces are written as they come, the tool calls are
//     assembled from their pieces by index, and a rich answer is checked
//     whole at the end as an unstreamed one is.
//
// Guarantees:
//   - Dispatch fills out[i] for every request and returns only when every
//     upstream call it started has ended; it honours ctx, and passes the
//     caller's cancellation through as context.Canceled;
//   - a packed request gets its own answer or, when the reply misses or
//     garbles it, cannot be parsed at all, or the packed call fails for any
//     reason but a rate limit, is re-sent singly within the same Dispatch:
//     a caller never sees another request's answer nor a pack's failure,
//     and the core's breaker sees only the singles' outcomes; a route whose
//     packs fail PackConfig.PauseAfter times in a row stops packing for
//     PauseFor (logged, and counted in Stats);
//   - upstream failures are logged with the request's context (404 and
//     auth as errors; 429, 5xx, timeouts, refused connections and invalid
//     answers as warnings), at most one per kind and endpoint per
//     LogInterval, naming the status and the endpoint's path, never the
//     key;
//   - usage is split among the requests of a native batch or a pack in
//     proportion to their text, and the shares add up to the upstream's
//     count exactly;
//   - failures are *batcher.UpstreamError with a class (StatusClass for
//     HTTP statuses, 404 being the configuration's fault; resets, refusals
//     and DNS failures are network errors; deadlines are timeouts; cut,
//     oversized, non-JSON or answerless bodies of a 200 are invalid
//     responses), a message naming the HTTP status and the endpoint's path
//     (and a request by its id, never by its place in a batch) and, when the upstream said anything about its limits, a
//     RateLimitInfo; their Message never holds the API key nor more than a
//     short, redacted part of the upstream's body;
//   - outgoing calls within a trace carry W3C traceparent (otelhttp), so
//     upstream spans are children of the batch's span (a call with no
//     trace to continue skips otelhttp; the core, not otelhttp, measures
//     every call), over pooled keep-alive connections
//     (HTTP/2 where offered), and response bodies are read up to
//     MaxResponseBytes.
package openai
