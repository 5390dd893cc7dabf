-- Statements of the API key repository (store/api_keys.py) that need a dialect fragment.

-- name: revoke
UPDATE api_keys SET status = 'revoked', revoked_at = ${now} WHERE key_id = ?

-- name: revoke_for_tenant
UPDATE api_keys SET status = 'revoked', revoked_at = ${now} WHERE key_id = ? AND tenant_id = ?

-- name: insert
INSERT INTO api_keys (key_id, tenant_id, secret_hash, scopes, label) VALUES (?, ?, ?, ?, ?)
