-- Posting errors: an event stored without journal entries because its posting rule raised (settld records the
-- error and goes on). One row per (tenant, source event); code and settld's message text.
CREATE TABLE ledger_errors (
    tenant_id        TEXT NOT NULL,
    job_id           TEXT NOT NULL,
    source_event_id  TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    source_seq       INTEGER NOT NULL,
    code             TEXT NOT NULL,
    message          TEXT NOT NULL,
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    PRIMARY KEY (tenant_id, source_event_id)
);
CREATE INDEX ledger_errors_job ON ledger_errors (tenant_id, job_id, source_seq);
