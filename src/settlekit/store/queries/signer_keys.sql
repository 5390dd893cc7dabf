-- Statements of store/signer_keys.py.

-- name: register
SELECT purpose, public_key_pem FROM signer_keys WHERE tenant_id = ? AND key_id = ?

-- name: insert_key
INSERT INTO signer_keys (tenant_id, key_id, public_key_pem, purpose, entity_id) VALUES (?, ?, ?, ?, ?)
