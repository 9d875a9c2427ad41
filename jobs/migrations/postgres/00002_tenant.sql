-- +goose Up
-- A job belongs to the tenant that created it; '' is no tenant (batcherd
-- without a tenants file, and every job made before tenants existed).
ALTER TABLE jobs ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at DESC, id DESC);

-- +goose Down
DROP INDEX jobs_tenant_created;
ALTER TABLE jobs DROP COLUMN tenant;
