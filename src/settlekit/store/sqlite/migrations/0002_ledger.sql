-- Ledger: journal entries (exactly once per tenant and entry id), balances updated only on insert,
-- per-posting party allocations.
CREATE TABLE ledger_entries (
    tenant_id        TEXT NOT NULL,
    entry_id         TEXT NOT NULL,
    job_id           TEXT NOT NULL,
    source_event_id  TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    source_seq       INTEGER NOT NULL,
    entry_index      INTEGER NOT NULL,
    at               TEXT NOT NULL,
    memo             TEXT,
    entry_json       TEXT NOT NULL,
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    PRIMARY KEY (tenant_id, entry_id)
);
CREATE INDEX ledger_entries_job ON ledger_entries (tenant_id, job_id, source_seq, entry_index);

CREATE TABLE ledger_balances (
    tenant_id      TEXT NOT NULL,
    account_id     TEXT NOT NULL,
    balance_cents  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, account_id)
);

CREATE TABLE ledger_allocations (
    tenant_id     TEXT NOT NULL,
    entry_id      TEXT NOT NULL,
    posting_id    TEXT NOT NULL,
    account_id    TEXT NOT NULL,
    party_id      TEXT NOT NULL,
    party_role    TEXT NOT NULL,
    currency      TEXT NOT NULL,
    amount_cents  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, entry_id, posting_id, party_id)
);
