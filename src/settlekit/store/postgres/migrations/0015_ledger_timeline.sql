-- Ledger timeline: every posting (party_id '') and every party allocation (party_id = the party) with its entry's
-- event-store position and time, and per-bucket sums of both axes (see settlekit.ledger.timeline), so balances as
-- of any instant or position and an account's postings page by page read a bounded number of index rows.
-- The key columns compare bytewise (COLLATE "C"): ids, never sorted for people; index builds and probes are cheaper.
CREATE TABLE ledger_postings (
    tenant_id      TEXT COLLATE "C" NOT NULL,
    party_id       TEXT COLLATE "C" NOT NULL,
    account_id     TEXT COLLATE "C" NOT NULL,
    position       BIGINT NOT NULL,
    entry_index    INTEGER NOT NULL,
    posting_index  INTEGER NOT NULL,
    entry_id       TEXT NOT NULL,
    at_ms          BIGINT NOT NULL,
    amount_cents   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, party_id, account_id, position, entry_index, posting_index)
);
CREATE INDEX ledger_postings_time ON ledger_postings (tenant_id, party_id, at_ms) INCLUDE (account_id, amount_cents);
CREATE INDEX ledger_postings_position ON ledger_postings (tenant_id, party_id, position)
    INCLUDE (account_id, amount_cents);

CREATE TABLE ledger_sums (
    tenant_id     TEXT COLLATE "C" NOT NULL,
    party_id      TEXT COLLATE "C" NOT NULL,
    axis          TEXT COLLATE "C" NOT NULL CHECK (axis IN ('t', 'p')),
    level         SMALLINT NOT NULL,
    bucket        BIGINT NOT NULL,
    account_id    TEXT COLLATE "C" NOT NULL,
    amount_cents  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, party_id, axis, level, bucket, account_id)
);

-- `settlekit ledger rebuild`: entries and allocations recomputed from the event streams, one run at a time per id.
CREATE TABLE ledger_rebuild_entries (
    run_id           TEXT NOT NULL,
    tenant_id        TEXT NOT NULL,
    entry_id         TEXT NOT NULL,
    job_id           TEXT NOT NULL,
    source_event_id  TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    source_seq       BIGINT NOT NULL,
    entry_index      INTEGER NOT NULL,
    at               TEXT NOT NULL,
    memo             TEXT,
    entry_json       TEXT NOT NULL,
    PRIMARY KEY (run_id, tenant_id, entry_id)
);
CREATE TABLE ledger_rebuild_allocations (
    run_id        TEXT NOT NULL,
    tenant_id     TEXT NOT NULL,
    entry_id      TEXT NOT NULL,
    posting_id    TEXT NOT NULL,
    account_id    TEXT NOT NULL,
    party_id      TEXT NOT NULL,
    party_role    TEXT NOT NULL,
    currency      TEXT NOT NULL,
    amount_cents  BIGINT NOT NULL,
    PRIMARY KEY (run_id, tenant_id, entry_id, posting_id, party_id)
);
