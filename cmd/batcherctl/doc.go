// Command batcherctl is the command-line client of a Batcher service, for
// people: submit one prompt, stream a JSONL file of requests with a live
// progress bar, check the service's health.
//
//	batcherctl submit -m sim-chat "Write a haiku about queues"
//	batcherctl run prompts.jsonl --out results.jsonl
//	batcherctl health
//	batcherctl jobs create requests.jsonl -m sim-chat   # prints the job's id
//	batcherctl jobs watch ID; batcherctl jobs results ID > results.jsonl
//	batcherctl jobs get ID; batcherctl jobs delete ID
//	batcherctl stats --once
//
// `batcherctl --help` and `batcherctl COMMAND --help` describe every flag,
// with examples. Global flags: --addr (the service, default 127.0.0.1:50051,
// or $BATCHERCTL_ADDR), --timeout, --tls with its --tls-* files for a
// service behind TLS, and a tenant's bearer token for a service with tenants:
// --token, --token-file, $BATCHERCTL_TOKEN or $BATCHERCTL_TOKEN_FILE, in that
// order (sent in plaintext only to a loopback address).
//
// Commands that print a result take -o/--output text|json; json is the
// protobuf JSON of the service's messages, for scripts. A command that
// writes a file names it with --out (-f): `run` writes JSONL result lines
// there (see package runfile for their shape; its summary's format is
// --summary), and its -o FILE, the old spelling, still works with a note
// naming --out.
//
// Progress: on a terminal `run` draws a bar (vbauerster/mpb); otherwise it
// prints a plain progress line every --progress-interval. `jobs watch` draws
// one bar per run group on a terminal, plain lines otherwise; `stats`
// redraws its view on a terminal and prints each snapshot otherwise.
// `jobs results` writes JSONL (protobuf JSON of JobResult), to the file
// --out names; its -o is the format, json alone, and -o FILE, which once
// named the file, is refused naming --out.
//
// Exit codes: 0 success; 1 a failure (a failed request, an unreachable or
// unhealthy service, a run that could not finish or had failed lines); 2 a
// usage error; 130 a run stopped by Ctrl-C.
//
// The command tree is built from one constructor per command (newSubmitCmd,
// newRunCmd, ...), each in a file of its own, registered in newRootCmd under
// a group: jobs (jobs.go, jobbars.go) and stats (stats.go) too.
package main
