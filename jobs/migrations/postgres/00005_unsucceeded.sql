-- +goose Up
-- Results filtered for an outcome other than success (the few a caller
-- looks for in a large job) read an index of their own instead of the
-- whole job's primary key. A task enters it once, when it ends so.
CREATE INDEX tasks_unsucceeded ON tasks (job_id, state, seq) WHERE done_seq > 0 AND state <> 2;

-- +goose Down
DROP INDEX tasks_unsucceeded;
