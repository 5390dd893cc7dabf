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
