-- Retention maintenance (store/maintenance.py), SQLite.

-- name: try_cleanup_lock
-- one writer at a time already: the lock is always granted (the key is taken and ignored)
SELECT ? IS NOT NULL
