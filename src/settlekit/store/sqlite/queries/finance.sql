-- Finance repository (store/finance.py), SQLite.

-- name: lock_tenant_closes
-- one writer at a time already: nothing to wait for (the tenant is taken and ignored)
SELECT ? IS NOT NULL
