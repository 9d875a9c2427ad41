// Package batchapi is the interface between Batcher's jobs and a provider's
// batch API (OpenAI's Batch API, Anthropic's Message Batches): work that may
// wait up to a day, at about half the online price.
//
// An Upstream is one provider account's batch API. The jobs package drives
// it through these steps, recording each id it gets before taking the next
// step, so that a process killed at any point resumes without uploading a
// file or creating a batch twice:
//
//  1. Encode: the job writes its items as the provider's input lines
//     (NewEncoder), streaming them from its store into a spool file, within
//     Limits (requests and bytes per file).
//  2. Upload (providers with a file API, Limits.Files): the spool goes up as
//     a named file; FindFile finds a file uploaded under that name whose id
//     was lost.
//  3. Create: a batch over the file (or, without a file API, over the input
//     itself), tagged with metadata (the job's id and chunk); Find finds a
//     batch created under those tags whose id was lost.
//  4. Get, with backoff, until the batch is terminal; its RequestCounts give
//     progress and an ETA.
//  5. Results: the output and error files, streamed, one Result per line,
//     mapped back by custom id. Lines the batch never ran (expired,
//     cancelled) come as Results with Outcome Expired or Cancelled.
//  6. Cancel, when the job is cancelled.
//
// Implementations: backend/openai (Backend.Batches) and llmsim's matching
// endpoints for tests. Every method is safe for concurrent use and honours
// its context; none keeps a whole file in memory.
package batchapi
