-- Ledger statements written for PostgreSQL.

-- name: lock_for_rebuild
-- The swap of `ledger rebuild`: appends that post entries wait until it commits (reads go on).
LOCK TABLE ledger_entries IN SHARE ROW EXCLUSIVE MODE;
