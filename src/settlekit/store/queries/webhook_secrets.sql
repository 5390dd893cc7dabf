-- Statements of store/webhook_secrets.py.

-- name: insert
INSERT INTO webhook_secrets (tenant_id, secret_id, secret) VALUES (?, ?, ?)

-- name: get
SELECT secret FROM webhook_secrets WHERE tenant_id = ? AND secret_id = ?

-- name: delete
DELETE FROM webhook_secrets WHERE tenant_id = ? AND secret_id = ?

-- name: exists
SELECT 1 FROM webhook_secrets WHERE tenant_id = ? AND secret_id = ?

-- name: list_ids
SELECT secret_id FROM webhook_secrets WHERE tenant_id = ?
