-- Retention maintenance (store/maintenance.py), PostgreSQL.

-- name: try_cleanup_lock
-- a transaction-scoped advisory lock: released at commit or rollback
SELECT pg_try_advisory_xact_lock(?)
