-- +goose Up
-- When a job entered CANCELLING and FINALIZING (Unix ns, 0: never), for the
-- Batch API's cancelling_at and finalizing_at.
ALTER TABLE jobs ADD COLUMN cancelling_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN finalizing_at INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE jobs DROP COLUMN finalizing_at;
ALTER TABLE jobs DROP COLUMN cancelling_at;
