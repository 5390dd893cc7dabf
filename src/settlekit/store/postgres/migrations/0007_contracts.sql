-- Contract documents (ContractDocument.v1) by hash: jobs pin an operator contract hash at MATCHED; allocations
-- resolve it here (party ids, split plans).
CREATE TABLE contract_documents (
    tenant_id      TEXT NOT NULL,
    contract_hash  TEXT NOT NULL,
    contract_id    TEXT,
    document_json  TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, contract_hash)
);
