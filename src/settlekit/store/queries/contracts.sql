-- Statements of store/contracts.py.

-- name: contract_documents
SELECT tenant_id, contract_hash, document_json FROM contract_documents

-- name: contract_stored
SELECT 1 FROM contract_documents WHERE tenant_id = ? AND contract_hash = ?

-- name: store_contract
INSERT INTO contract_documents (tenant_id, contract_hash, contract_id, document_json)
VALUES (?, ?, ?, ?)
ON CONFLICT DO NOTHING

-- name: rekey_contract
UPDATE contract_documents SET contract_hash = ? WHERE tenant_id = ? AND contract_hash = ?

-- name: drop_duplicate_contract
DELETE FROM contract_documents WHERE tenant_id = ? AND contract_hash = ?
