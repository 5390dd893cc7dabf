-- Job artifacts (04-artifacts.md §10): one row per artifact, never overwritten; unique per (tenant, artifact id)
-- and per (tenant, job, type, source event). artifact_outbox is the default delivery sink (one row per
-- artifact); artifact_job_state keeps the artifact consumer's per-job fold so it never re-reads a stream.
CREATE TABLE artifacts (
    tenant_id          TEXT NOT NULL,
    artifact_id        TEXT NOT NULL,
    job_id             TEXT NOT NULL,
    artifact_type      TEXT NOT NULL,
    source_event_id    TEXT NOT NULL,
    source_chain_hash  TEXT NOT NULL,
    artifact_hash      TEXT NOT NULL,
    job_version        BIGINT NOT NULL,
    artifact_json      TEXT NOT NULL,
    generated_at       TEXT NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, artifact_id),
    UNIQUE (tenant_id, job_id, artifact_type, source_event_id)
);
CREATE INDEX artifacts_job ON artifacts (tenant_id, job_id, job_version, artifact_id);

CREATE TABLE artifact_outbox (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    artifact_id    TEXT NOT NULL,
    artifact_type  TEXT NOT NULL,
    artifact_hash  TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, artifact_id)
);

CREATE TABLE artifact_job_state (
    tenant_id   TEXT NOT NULL,
    job_id      TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    state_json  TEXT NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, job_id)
);
