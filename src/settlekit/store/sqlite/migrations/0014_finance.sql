-- Month close (docs/finance.md). finance_entry_periods assigns each journal entry to the one period whose close
-- counted it (an entry keeps its own time; `carried` marks an entry whose month was already closed when it
-- arrived). finance_log_leaves is the tenant's append-only Merkle log; finance_closes holds the signed documents;
-- finance_gl_mappings the tenant's chart-of-accounts mapping. Text compares by code point.
CREATE TABLE finance_closes (
    tenant_id       TEXT NOT NULL,
    month           TEXT NOT NULL,
    artifact_hash   TEXT NOT NULL,
    tree_size       INTEGER NOT NULL,
    root_hash       TEXT NOT NULL,
    journal_sha256  TEXT NOT NULL,
    document_json   TEXT NOT NULL,
    created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    PRIMARY KEY (tenant_id, month)
);

CREATE TABLE finance_entry_periods (
    tenant_id  TEXT NOT NULL,
    entry_id   TEXT NOT NULL,
    period     TEXT NOT NULL,
    at         TEXT NOT NULL,
    carried    INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, entry_id)
);
CREATE INDEX finance_entry_periods_order ON finance_entry_periods (tenant_id, period, at, entry_id);
CREATE INDEX finance_ledger_entries_at ON ledger_entries (tenant_id, at);

CREATE TABLE finance_log_leaves (
    tenant_id        TEXT NOT NULL,
    leaf_index       INTEGER NOT NULL,
    period           TEXT NOT NULL,
    stream_id        TEXT NOT NULL,
    head_chain_hash  TEXT NOT NULL,
    event_count      INTEGER NOT NULL,
    leaf_hash        TEXT NOT NULL,
    PRIMARY KEY (tenant_id, leaf_index)
);
CREATE INDEX finance_log_leaves_stream ON finance_log_leaves (tenant_id, stream_id, leaf_index);
CREATE INDEX finance_log_leaves_period ON finance_log_leaves (tenant_id, period, stream_id);

CREATE TABLE finance_gl_mappings (
    tenant_id     TEXT PRIMARY KEY,
    mapping_hash  TEXT NOT NULL,
    mapping_json  TEXT NOT NULL,
    updated_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now'))
);
