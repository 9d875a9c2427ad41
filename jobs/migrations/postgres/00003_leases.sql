-- +goose Up
-- A lease is held per owner and job, not per task: renewing an owner's
-- claims is one row, and no index of tasks has to find running tasks.
CREATE TABLE leases (
    job_id TEXT NOT NULL,
    owner  TEXT NOT NULL,
    until  BIGINT NOT NULL,
    PRIMARY KEY (job_id, owner)
);
CREATE INDEX leases_owner ON leases (owner);
INSERT INTO leases (job_id, owner, until)
    SELECT job_id, lease_owner, MAX(lease_until) FROM tasks WHERE state = 1 GROUP BY job_id, lease_owner;
ALTER TABLE tasks DROP COLUMN lease_until;
-- Tasks keep two partial indexes beside the primary key: the open ones
-- (pending or waiting judges), for claims and EndPending, and the ended
-- ones by done number, for the output files. A claim or a completion thus
-- adds one entry to the primary key and at most one to a partial index,
-- instead of one to each of three indexes; and no index leads a
-- completion's plan to the dead entries every finished task leaves under
-- (job_id, state = 1), which made each group commit walk them all.
DROP INDEX tasks_state;
DROP INDEX tasks_done;
CREATE INDEX tasks_open ON tasks (job_id, seq) WHERE state IN (0, 6);
CREATE INDEX tasks_done ON tasks (job_id, done_seq) WHERE done_seq > 0;

-- +goose Down
DROP INDEX tasks_done;
DROP INDEX tasks_open;
CREATE INDEX tasks_state ON tasks (job_id, state, seq);
CREATE INDEX tasks_done ON tasks (job_id, done_seq);
ALTER TABLE tasks ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
UPDATE tasks t SET lease_until = l.until FROM leases l WHERE t.state = 1 AND t.job_id = l.job_id AND t.lease_owner = l.owner;
DROP TABLE leases;
