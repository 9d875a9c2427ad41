// Package runfile streams a file of requests through a Batcher stream and
// writes their results, in input order, to a file of results. It is the
// engine of `batcherctl run`.
//
// # Input
//
// One batcher.v1.Request per line in protobuf JSON (protojson: field names
// in lowerCamelCase or as in the proto, enums by name). Blank lines are
// skipped. A request without an id gets "line-N", N its line number
// (counted from 1), so that a rerun gives it the same id.
//
// # Output
//
// One JSON object per line, in input order:
//
//	{"line":3,"id":"q3","completion":{...}}
//	{"line":4,"id":"line-4","error":{"code":"INVALID_ARGUMENT","message":"line 4: ..."}}
//
// completion is the service's Completion in protojson; error is set when the
// request failed for any reason: a line that does not parse, a request the
// service rejected (an unknown model, a bad field), or a completion that
// carries an error (then both are set).
//
// # Guarantees
//
//   - Every line of input that was read before the run stopped gets exactly
//     one result line, unless its request was in flight when the stream
//     broke or was aborted: such a request has no terminal result, so it gets
//     no line, and neither does any later one. The output is therefore
//     always the results of a prefix of the input, in order, and a rerun
//     with Resume finishes it.
//   - Memory is bounded by the window: at most Config.Window requests are
//     sent and not yet written; the reorder buffer that puts results back in
//     input order holds no more.
//   - Stop (the first Ctrl-C) stops reading, flushes the stream's partial
//     batches, waits for every request in flight and writes its result;
//     cancelling Run's context (the second Ctrl-C) aborts the stream and
//     writes only the results that had arrived, up to the first missing one.
//   - After a failed write of the output, nothing more is sent.
//   - ScanResults reads an output file for Resume: the ids it holds as
//     succeeded, and the length of its last complete line, so that a line
//     cut short by a crash is dropped rather than continued. The requests
//     it holds as error lines are for the resumed run to send again:
//     KeepSucceeded copies the file without those lines.
//
// # Structure
//
// A sender reads, parses and sends the lines (for input that is not a
// regular file, a reader goroutine of its own reads and parses, so that a
// read that waits cannot hold up Stop), and hands each sent request's
// handle to the writer in input order through a bounded channel: the
// reorder buffer. The client's receive goroutine resolves the handles as
// completions arrive, in any order; the writer waits on the oldest and
// writes it. Items travel in batches of up to 64, so that goroutines wake
// once per batch. Lines of the common shape are parsed, and completions
// encoded, without protojson's reflection (fastParse, appendCompletion),
// which took a third of the tool's CPU time per request; protojson handles the
// rest, and fuzz tests hold both to protojson's reading.
package runfile
