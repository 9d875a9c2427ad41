-- +goose Up
-- When a chunk's last create call began (Unix ms, 0: none): until it plus
-- the create timeout that call may still be in flight, and a restart waits
-- for the batch it may make before creating one.
ALTER TABLE upstream_batches ADD COLUMN create_started INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE upstream_batches DROP COLUMN create_started;
