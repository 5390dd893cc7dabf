"""Contract documents by hash, per tenant. Documents are immutable (content-addressed), so lookups are cached."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
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


class ContractResolver:
    """(tenant, hash) → document, or None when not registered. The documents found are cached (a hash never
    changes its document; at most `max_cached` are kept); a hash not registered is read again each time, since it
    may be registered later."""

    def __init__(self, db: Database, *, max_cached: int = 1024):
        self.db = db
        self.max_cached = max_cached
        self._found: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, tenant_id: str, digest: str) -> Mapping[str, Any] | None:
        document = self.cached(tenant_id, digest)
        if document is None:
            document = get_contract(self.db, tenant_id, digest)
            if document is not None:
                with self._lock:
                    if len(self._found) >= self.max_cached:
                        self._found.pop(next(iter(self._found)))
                    self._found[(tenant_id, digest)] = document
        return document

    def cached(self, tenant_id: str, digest: str) -> Mapping[str, Any] | None:
        """The document if it is in the cache (no database read), else None."""
        return self._found.get((tenant_id, digest))


def contract_resolver(db: Database) -> ContractResolver:
    """(tenant, hash) → document, caching documents found (a hash never changes its document)."""
    return ContractResolver(db)
