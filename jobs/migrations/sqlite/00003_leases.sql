-- +goose Up
-- A lease is held per owner and job, not per task: renewing an owner's
-- claims is one row. (SQLite keeps its indexes of tasks: it leaves no dead
-- entries behind an update, and its claims use tasks_state.)
CREATE TABLE leases (
    job_id TEXT NOT NULL,
    owner  TEXT NOT NULL,
    until  INTEGER NOT NULL,
    PRIMARY KEY (job_id, owner)
);
CREATE INDEX leases_owner ON leases (owner);
INSERT INTO leases (job_id, owner, until)
    SELECT job_id, lease_owner, MAX(lease_until) FROM tasks WHERE state = 1 GROUP BY job_id, lease_owner;
ALTER TABLE tasks DROP COLUMN lease_until;

-- +goose Down
ALTER TABLE tasks ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET lease_until = COALESCE((SELECT until FROM leases l WHERE l.job_id = tasks.job_id AND l.owner = tasks.lease_owner), 0)
    WHERE state = 1;
DROP TABLE leases;
