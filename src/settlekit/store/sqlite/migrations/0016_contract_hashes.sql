-- Contract documents keyed by settld's contract hash: the canonical JSON of the document as registered (absent keys
-- absent, null ones null). Before, the key was settlekit's own hash of the document with every absent optional key
-- filled with null. A hash pinned before (a job's operatorContractHash or customerContractHash) keeps resolving
-- through contract_hash_aliases: alias_hash is the old key, contract_hash the document's key now. After this file
-- the migration's data step (store/contracts.py rekey_contract_documents) moves every stored document to its new
-- key and records the alias, in the same transaction: the hash is computed in Python (canonical JSON).
CREATE TABLE contract_hash_aliases (
    tenant_id      TEXT NOT NULL,
    alias_hash     TEXT NOT NULL,
    contract_hash  TEXT NOT NULL,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    PRIMARY KEY (tenant_id, alias_hash)
);
