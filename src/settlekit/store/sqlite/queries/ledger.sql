-- Ledger statements written for SQLite.

-- name: lock_for_rebuild
-- The swap of `ledger rebuild`: a write transaction already excludes every other writer (BEGIN IMMEDIATE).
SELECT 1;
