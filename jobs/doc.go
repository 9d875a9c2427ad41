// Package jobs runs durable batch jobs: a caller hands over thousands to
// millions of inputs and walks away; the jobs run them through the core
// (*batcher.Batcher) at background priority, survive restarts and kill -9,
// report progress with an ETA, and write the results to files.
//
// # Store
//
// A Store keeps jobs and their tasks (one run of one input, or an input's
// judge). Two implementations share one set of queries (sqlStore): SQLite
// through modernc.org/sqlite, the embedded default, in WAL mode; and
// PostgreSQL through pgx, which several batcherd replicas may share. Both
// pass one conformance suite, jobs/storetest. Migrations are versioned,
// embedded, and applied at open by goose.
//
// Tasks are claimed in chunks under a lease (FOR UPDATE SKIP LOCKED on
// PostgreSQL); a dead process's claims return to pending when the lease ends,
// or at once when the same SQLite process restarts. Results are recorded in
// groups, one transaction for many tasks, which numbers them in commit order
// (the done number). Counts per state, per group and tokens live on the job
// row and move in the same transaction, so progress never scans tasks.
//
// # Items
//
// An item carries everything a Submit carries (ItemRequest: the messages
// with their parts, names, tool calls and tool answers, the parameters,
// tools, tool choice, response format, user and extra body fields), stored
// in the task's encoded request and passed to the core unchanged. A chat
// line of an OpenAI batch file is read by the front door's decoder
// (openaiapi.ChatBody). When the job is created each item is checked
// against its model by the core's own rule, the one Submit applies
// (batcher.Validate; the spec's defaults by batcher.ValidateParams): a
// parameter out of its range, or what the model's backends cannot honour,
// is an error line naming the line, the field and the limit, never run
// with it dropped. A chat answer's output line is the front door's
// chat.completion (openaiapi.ChatCompletionBody): the whole message, tool
// calls, refusal and logprobs included.
//
// # Batch-API dispatch
//
// A job may go through its route's provider batch API (Spec.Dispatch,
// Config.BatchRoutes; backend/batchapi) at the provider's batch price: its
// tasks are written to upstream input files in chunks within the
// provider's limits, uploaded, run upstream, and their answers recorded as
// online results are. Every upstream id is recorded before the next step,
// so a process killed at any step resumes without uploading a file or
// creating a batch twice (see DESIGN.md). While tasks wait upstream,
// Manager.Progress shows them (Progress.Upstream: the items, the upstream
// batches by provider state, the provider's ETA).
//
// # Cost
//
// Config.Prices (Manager.SetPrices) holds each route's price table: input
// and output USD per million tokens and the batch API's discount. A
// succeeded task's cost is computed once, in Manager.price, from its usage
// and how it was sent (online or batch_api), whichever door created it; its
// output line carries it (cost_usd, dispatch), the store sums it per job
// with what the same tokens cost online (Job.Cost, Job.OnlineCost), and
// summary.json and Progress report the cost and the saving; the recorded
// tasks' cost is counted in batcher_cost_total (Config.MeterProvider).
//
// # Guarantees
//
//   - A finished task is never run again: Complete records only tasks the
//     caller still holds, and a task is claimed only while pending.
//   - A claimed task whose holder dies runs again (at most the tasks in
//     flight at the crash, plus those awaiting their group commit).
//   - The output files hold each finished task exactly once: the database is
//     the truth, files are appended in done-number order, and on resume each
//     file is cut back to its last whole line and continued after the done
//     number that line carries.
//
// # Files
//
// The manager: manager.go (Manager, New, routes and prices), config.go
// (Config, its defaults, Core), schedule.go (Start, the loop that starts
// runs, Shutdown, leases of dead processes), access.go (Get, List,
// Progress, Watch, Cancel, Delete, Results), create.go (Begin, Creator:
// lines in, tasks laid out), spec.go (a spec's validation), tenant.go and
// quota.go (tenants and their quotas), progress.go (rates and the ETA).
//
// A run of one job: run.go (its states, its loop and what it waits on),
// run_admit.go (the window of requests in flight, claims, submission),
// pace.go (the job's own delays and rates), run_request.go (a task as a
// core request), judge.go (a judge's prompt), run_commit.go (results, group
// commits, the output files), run_end.go (cancel, expiry, the job's end),
// output.go and outdir.go (the output files and where they go), cost.go
// (prices, cost and the jobs' metrics).
//
// Items: types.go (Job, Spec, Task, Outcome, their states), item.go
// (ItemRequest, the stored request), openai.go (OpenAI batch lines in and
// out), metadata.go and fieldname.go (metadata bounds, field names in
// error lines).
//
// The store: store.go (the Store interface, errors), sqlstore.go (the SQL
// store, its dialect and write queue), sqlstore_jobs.go (job rows and
// counts), sqlstore_claim.go (claims), sqlstore_lease.go (leases and their
// release), sqlstore_complete.go (group commits, ending pending tasks),
// sqlstore_read.go (results and task reads), sqlite.go, postgres.go,
// migrate.go and migrations/ (the two databases and their schema),
// liveness.go (telling a dead lease owner from a live one).
//
// Batch-API dispatch: batchapi.go (BatchRoute, a run's upstream
// dispatcher and its chunking), upstream.go (Chunk, its recorded steps and
// their store), upstream_drive.go (driving a chunk through them), twins.go
// (batches created twice), budget.go (enqueued-token budgets),
// batchapi_metric.go (its counters).
package jobs
