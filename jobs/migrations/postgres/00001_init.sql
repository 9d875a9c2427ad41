-- +goose Up
CREATE TABLE jobs (
    id         TEXT PRIMARY KEY,
    spec       TEXT NOT NULL,
    state      BIGINT NOT NULL,
    total      BIGINT NOT NULL DEFAULT 0,
    pending    BIGINT NOT NULL DEFAULT 0,
    running    BIGINT NOT NULL DEFAULT 0,
    succeeded  BIGINT NOT NULL DEFAULT 0,
    failed     BIGINT NOT NULL DEFAULT 0,
    cancelled  BIGINT NOT NULL DEFAULT 0,
    expired    BIGINT NOT NULL DEFAULT 0,
    invalid    BIGINT NOT NULL DEFAULT 0,
    tokens_in  BIGINT NOT NULL DEFAULT 0,
    tokens_out BIGINT NOT NULL DEFAULT 0,
    done_seq   BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    started_at BIGINT NOT NULL DEFAULT 0,
    ended_at   BIGINT NOT NULL DEFAULT 0,
    error      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);

CREATE TABLE job_groups (
    job_id    TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    grp       BIGINT NOT NULL,
    total     BIGINT NOT NULL DEFAULT 0,
    pending   BIGINT NOT NULL DEFAULT 0,
    running   BIGINT NOT NULL DEFAULT 0,
    succeeded BIGINT NOT NULL DEFAULT 0,
    failed    BIGINT NOT NULL DEFAULT 0,
    cancelled BIGINT NOT NULL DEFAULT 0,
    expired   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, grp)
);

CREATE TABLE tasks (
    job_id      TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    item        BIGINT NOT NULL,
    grp         BIGINT NOT NULL,
    run         BIGINT NOT NULL,
    custom_id   TEXT NOT NULL,
    line        BIGINT NOT NULL,
    state       BIGINT NOT NULL,
    request     BYTEA,
    model       TEXT NOT NULL DEFAULT '',
    result      BYTEA,
    tokens_in   BIGINT NOT NULL DEFAULT 0,
    tokens_out  BIGINT NOT NULL DEFAULT 0,
    done_seq    BIGINT NOT NULL DEFAULT 0,
    attempts    BIGINT NOT NULL DEFAULT 0,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_until BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, seq)
);
CREATE INDEX tasks_state ON tasks (job_id, state, seq);
CREATE INDEX tasks_done ON tasks (job_id, done_seq);

-- +goose Down
DROP TABLE tasks;
DROP TABLE job_groups;
DROP TABLE jobs;
