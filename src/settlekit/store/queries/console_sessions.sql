-- Statements of the console's session repository (store/console_sessions.py).

-- name: insert
INSERT INTO console_sessions (session_hash, key_id, tenant_id, csrf, expires_at) VALUES (?, ?, ?, ?, ?)

-- name: find
SELECT key_id, tenant_id, csrf, flash FROM console_sessions WHERE session_hash = ? AND expires_at > ?

-- name: set_flash
UPDATE console_sessions SET flash = ? WHERE session_hash = ?

-- name: take_flash
UPDATE console_sessions SET flash = NULL WHERE session_hash = ? AND flash IS NOT NULL

-- name: delete
DELETE FROM console_sessions WHERE session_hash = ?

-- name: delete_for_key
DELETE FROM console_sessions WHERE key_id = ?

-- name: purge_expired
DELETE FROM console_sessions WHERE expires_at <= ?
