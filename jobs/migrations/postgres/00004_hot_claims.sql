-- +goose Up
-- Open tasks are those without a done number: a claim (state 0 to 1), a
-- renewal and a release then change no indexed column, so PostgreSQL
-- updates the row in place on its page (a HOT update: no new index entry,
-- and the page prunes its own dead versions, with or without autovacuum).
-- The free space a page keeps (fillfactor) is room for those versions.
DROP INDEX tasks_open;
CREATE INDEX tasks_open ON tasks (job_id, seq) WHERE done_seq = 0;
ALTER TABLE tasks SET (fillfactor = 70);

-- +goose Down
ALTER TABLE tasks RESET (fillfactor);
DROP INDEX tasks_open;
CREATE INDEX tasks_open ON tasks (job_id, seq) WHERE state IN (0, 6);
