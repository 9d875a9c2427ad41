-- +goose Up
-- Which door of Batcher's own made a job (Spec.Kind; '': any other), so
-- that the OpenAI Batch API lists its batches in the query, a page at a
-- time, not by reading every job of the tenant. A batch made before the
-- column is known by its endpoint tag in the spec.
ALTER TABLE jobs ADD COLUMN kind TEXT NOT NULL DEFAULT '';
UPDATE jobs SET kind = 'openai_batch' WHERE spec LIKE '%"batcher.openai.endpoint":"%';
CREATE INDEX jobs_kind_created ON jobs (kind, created_at DESC, id DESC);
CREATE INDEX jobs_tenant_kind_created ON jobs (tenant, kind, created_at DESC, id DESC);

-- +goose Down
DROP INDEX jobs_tenant_kind_created;
DROP INDEX jobs_kind_created;
ALTER TABLE jobs DROP COLUMN kind;
