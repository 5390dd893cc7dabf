-- Statements of store/idempotency.py.

-- name: record
INSERT INTO idempotency_keys (tenant_id, principal_id, endpoint, idem_key, request_hash, status_code, response_json, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)

-- name: purge_expired_in
DELETE FROM idempotency_keys WHERE expires_at < ?

-- name: take
INSERT INTO idempotency_keys (tenant_id, principal_id, endpoint, idem_key, request_hash, status_code, response_json, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING

-- name: read
SELECT request_hash, status_code, response_json, expires_at FROM idempotency_keys
WHERE tenant_id = ? AND principal_id = ? AND endpoint = ? AND idem_key = ?

-- name: take_over
-- the holder died: its lease ran out; taken only while the stale reservation still holds the key
UPDATE idempotency_keys SET response_json = ?, expires_at = ?
WHERE tenant_id = ? AND principal_id = ? AND endpoint = ? AND idem_key = ? AND status_code = ? AND response_json = ?

-- name: complete
-- only while this reservation (status_code 0, its token) still holds the key
UPDATE idempotency_keys SET status_code = ?, response_json = ?, expires_at = ?
WHERE tenant_id = ? AND principal_id = ? AND endpoint = ? AND idem_key = ? AND status_code = ? AND response_json = ?

-- name: release
DELETE FROM idempotency_keys
WHERE tenant_id = ? AND principal_id = ? AND endpoint = ? AND idem_key = ? AND status_code = ? AND response_json = ?
