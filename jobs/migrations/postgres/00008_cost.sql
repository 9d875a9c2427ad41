-- +goose Up
-- What a job's tasks cost at their routes' price tables (USD), and what the
-- same tokens cost online: the saving of batch-API dispatch.
ALTER TABLE jobs ADD COLUMN cost DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN online_cost DOUBLE PRECISION NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE jobs DROP COLUMN online_cost;
ALTER TABLE jobs DROP COLUMN cost;
