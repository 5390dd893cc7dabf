"""Contract documents by hash, per tenant. Documents are immutable (content-addressed), so lookups are cached."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from settlekit.events.canonical import parse_json
from settlekit.ledger import contract_hash, normalize_contract_document
from settlekit.store.db import Database, Tx


def put_contract(db: Database, tenant_id: str, document: Any) -> str:
    """Validate and store a ContractDocument.v1; returns its hash. Storing the same document again is a no-op."""
    normalized = normalize_contract_document(document)
    digest = contract_hash(document)
    with db.transaction() as tx:
        tx.execute("INSERT INTO contract_documents (tenant_id, contract_hash, contract_id, document_json)"
                   " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                   (tenant_id, digest, normalized.get("contractId"),
                    json.dumps(document, ensure_ascii=False, separators=(",", ":"))))
    return digest


def get_contract(db: Database, tenant_id: str, digest: str) -> dict[str, Any] | None:
    with db.query() as tx:
        row = tx.fetchone("SELECT document_json FROM contract_documents WHERE tenant_id = ? AND contract_hash = ?",
                          (tenant_id, digest))
    return None if row is None else parse_json(row[0])


def contract_in_tx(tx: Tx, tenant_id: str, digest: str) -> dict[str, Any] | None:
    """The document inside an open transaction (the artifact consumer's turn), or None when not registered."""
    row = tx.fetchone("SELECT document_json FROM contract_documents WHERE tenant_id = ? AND contract_hash = ?",
                      (tenant_id, digest))
    return None if row is None else parse_json(row[0])


def contract_resolver(db: Database) -> Callable[[str, str], Mapping[str, Any] | None]:
    """(tenant, hash) → document, caching documents found (a hash never changes its document)."""

    @functools.lru_cache(maxsize=1024)
    def found(tenant_id: str, digest: str) -> Mapping[str, Any]:
        document = get_contract(db, tenant_id, digest)
        if document is None:
            raise LookupError(digest)
        return document

    def resolve(tenant_id: str, digest: str) -> Mapping[str, Any] | None:
        try:
            return found(tenant_id, digest)
        except LookupError:
            return None  # not registered: the default parties apply, as for a job without a contract

    return resolve
