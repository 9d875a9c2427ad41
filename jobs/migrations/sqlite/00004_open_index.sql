-- +goose Up
-- Index only what each path looks for, as PostgreSQL does (its 00003 to
-- 00005): open tasks (no done number) for claims, releases and ends, and
-- done tasks by done number for the files. A claim (state 0 to 1, its
-- owner, its attempt) then changes no indexed column, and a completion
-- moves a task from one partial index to the other: 3 index writes a
-- task where tasks_state and the full tasks_done took 6 (4 for a task
-- that did not succeed). Results in item order read the primary key;
-- those that did not succeed, the few a caller filters for, have an index
-- of their own.
DROP INDEX tasks_state;
DROP INDEX tasks_done;
CREATE INDEX tasks_open ON tasks (job_id, seq) WHERE done_seq = 0;
CREATE INDEX tasks_done ON tasks (job_id, done_seq) WHERE done_seq > 0;
CREATE INDEX tasks_unsucceeded ON tasks (job_id, state, seq) WHERE done_seq > 0 AND state <> 2;

-- +goose Down
DROP INDEX tasks_unsucceeded;
DROP INDEX tasks_done;
DROP INDEX tasks_open;
CREATE INDEX tasks_state ON tasks (job_id, state, seq);
CREATE INDEX tasks_done ON tasks (job_id, done_seq);
