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

-- name: resolve
-- the document stored under the hash, else the one an alias of that hash names
SELECT document_json, 0 AS via_alias FROM contract_documents WHERE tenant_id = ? AND contract_hash = ?
UNION ALL
SELECT d.document_json, 1 AS via_alias FROM contract_hash_aliases a JOIN contract_documents d
    ON d.tenant_id = a.tenant_id AND d.contract_hash = a.contract_hash
 WHERE a.tenant_id = ? AND a.alias_hash = ?
 ORDER BY via_alias LIMIT 1

-- name: add_alias
INSERT INTO contract_hash_aliases (tenant_id, alias_hash, contract_hash) VALUES (?, ?, ?) ON CONFLICT DO NOTHING
