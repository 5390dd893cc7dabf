-- Finance repository (store/finance.py), PostgreSQL.

-- name: lock_tenant_closes
-- a transaction-scoped advisory lock per tenant: closes of one tenant run one at a time
SELECT pg_advisory_xact_lock(hashtextextended('settlekit.finance:' || ?, 0))
