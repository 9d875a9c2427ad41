-- +goose Up
CREATE TABLE jobs (
    id         TEXT PRIMARY KEY,
    spec       TEXT NOT NULL,
    state      INTEGER NOT NULL,
    total      INTEGER NOT NULL DEFAULT 0,
    pending    INTEGER NOT NULL DEFAULT 0,
    running    INTEGER NOT NULL DEFAULT 0,
    succeeded  INTEGER NOT NULL DEFAULT 0,
    failed     INTEGER NOT NULL DEFAULT 0,
    cancelled  INTEGER NOT NULL DEFAULT 0,
    expired    INTEGER NOT NULL DEFAULT 0,
    invalid    INTEGER NOT NULL DEFAULT 0,
    tokens_in  INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    done_seq   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    started_at INTEGER NOT NULL DEFAULT 0,
    ended_at   INTEGER NOT NULL DEFAULT 0,
    error      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);

CREATE TABLE job_groups (
    job_id    TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    grp       INTEGER NOT NULL,
    total     INTEGER NOT NULL DEFAULT 0,
    pending   INTEGER NOT NULL DEFAULT 0,
    running   INTEGER NOT NULL DEFAULT 0,
    succeeded INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    expired   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, grp)
);

CREATE TABLE tasks (
    job_id      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    item        INTEGER NOT NULL,
    grp         INTEGER NOT NULL,
    run         INTEGER NOT NULL,
    custom_id   TEXT NOT NULL,
    line        INTEGER NOT NULL,
    state       INTEGER NOT NULL,
    request     BLOB,
    model       TEXT NOT NULL DEFAULT '',
    result      BLOB,
    tokens_in   INTEGER NOT NULL DEFAULT 0,
    tokens_out  INTEGER NOT NULL DEFAULT 0,
    done_seq    INTEGER NOT NULL DEFAULT 0,
    attempts    INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_until INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, seq)
);
CREATE INDEX tasks_state ON tasks (job_id, state, seq);
CREATE INDEX tasks_done ON tasks (job_id, done_seq);

-- +goose Down
DROP TABLE tasks;
DROP TABLE job_groups;
DROP TABLE jobs;
