-- +goose Up
-- A job's chunks dispatched through a provider's batch API: the tasks each
-- holds, and every upstream id as soon as it is known, so that a process
-- killed at any step resumes without uploading or creating twice.
CREATE TABLE upstream_batches (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    chunk      INTEGER NOT NULL,
    route      TEXT NOT NULL,
    step       INTEGER NOT NULL,
    seqs       BYTEA NOT NULL,
    file_name  TEXT NOT NULL DEFAULT '',
    file_id    TEXT NOT NULL DEFAULT '',
    batch_id   TEXT NOT NULL DEFAULT '',
    status     TEXT NOT NULL DEFAULT '',
    total      BIGINT NOT NULL DEFAULT 0,
    completed  BIGINT NOT NULL DEFAULT 0,
    failed     BIGINT NOT NULL DEFAULT 0,
    eta        BIGINT NOT NULL DEFAULT 0,
    updated_at BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, chunk)
);

-- +goose Down
DROP TABLE upstream_batches;
