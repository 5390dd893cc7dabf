-- A split plan may give one party two roles (two rules naming it, or the rest of the cents going to a role's
-- default party that a rule also names): its allocations of one posting then differ by role only, so the role is
-- part of an allocation's key (SQLite cannot change a primary key: the tables are made again).
CREATE TABLE ledger_allocations_by_role (
    tenant_id     TEXT NOT NULL,
    entry_id      TEXT NOT NULL,
    posting_id    TEXT NOT NULL,
    account_id    TEXT NOT NULL,
    party_id      TEXT NOT NULL,
    party_role    TEXT NOT NULL,
    currency      TEXT NOT NULL,
    amount_cents  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, entry_id, posting_id, party_id, party_role)
);
INSERT INTO ledger_allocations_by_role
    SELECT tenant_id, entry_id, posting_id, account_id, party_id, party_role, currency, amount_cents
      FROM ledger_allocations;
DROP TABLE ledger_allocations;
ALTER TABLE ledger_allocations_by_role RENAME TO ledger_allocations;
CREATE TABLE ledger_rebuild_allocations_by_role (
    run_id        TEXT NOT NULL,
    tenant_id     TEXT NOT NULL,
    entry_id      TEXT NOT NULL,
    posting_id    TEXT NOT NULL,
    account_id    TEXT NOT NULL,
    party_id      TEXT NOT NULL,
    party_role    TEXT NOT NULL,
    currency      TEXT NOT NULL,
    amount_cents  INTEGER NOT NULL,
    PRIMARY KEY (run_id, tenant_id, entry_id, posting_id, party_id, party_role)
);
INSERT INTO ledger_rebuild_allocations_by_role
    SELECT run_id, tenant_id, entry_id, posting_id, account_id, party_id, party_role, currency, amount_cents
      FROM ledger_rebuild_allocations;
DROP TABLE ledger_rebuild_allocations;
ALTER TABLE ledger_rebuild_allocations_by_role RENAME TO ledger_rebuild_allocations;
