"""Contract documents by hash, per tenant. Documents are immutable (content-addressed), so lookups are cached.

A document is stored under settld's contract hash (`settlekit.ledger.contract_hash`: the document as given).
`contract_hash_aliases` maps another hash to a stored document's: the hash settlekit gave before it hashed as settld
does (`legacy_contract_hash`), recorded by migration 0016 for the documents stored then and at every registration
since, so a job that pinned the old hash keeps resolving its document. A document's own hash wins over an alias.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from settlekit.events.canonical import canonical_hash, parse_json
from settlekit.ledger import contract_hash, legacy_contract_hash, normalize_contract_document
from settlekit.store.database import Database, Tx
from settlekit.store.sql import statements


@dataclass(frozen=True)
class StoredContract:
    contract_hash: str
    created: bool  # False: the same document was registered before


def put_contract(db: Database, tenant_id: str, document: Any) -> str:
    """`store_contract`'s hash alone."""
    return store_contract(db, tenant_id, document).contract_hash


def store_contract(db: Database, tenant_id: str, document: Any) -> StoredContract:
    """Validate and store a ContractDocument.v1 under its hash (settld's). Storing the same document again changes
    nothing. The hash settlekit gave the document before (absent optional keys as null) becomes an alias of it,
    unless that alias already names another document (one that differs only in null against absent keys)."""
    normalized = normalize_contract_document(document)
    digest = contract_hash(document)
    legacy = legacy_contract_hash(document)
    with db.transaction() as tx:
        created = tx.execute(statements("contracts", tx.dialect)["store_contract"],
                             (tenant_id, digest, normalized.get("contractId"),
                              json.dumps(document, ensure_ascii=False, separators=(",", ":")))) > 0
        if legacy != digest:
            tx.execute(statements("contracts", tx.dialect)["add_alias"], (tenant_id, legacy, digest))
    return StoredContract(digest, created)


def get_contract(db: Database, tenant_id: str, digest: str) -> dict[str, Any] | None:
    """The document stored under `digest`, or under the hash `digest` is an alias of; None when neither."""
    with db.query() as tx:
        return contract_in_tx(tx, tenant_id, digest)


def contract_in_tx(tx: Tx, tenant_id: str, digest: str) -> dict[str, Any] | None:
    """The document inside an open transaction (the artifact consumer's turn), or None when not registered."""
    row = tx.fetchone(statements("contracts", tx.dialect)["resolve"], (tenant_id, digest, tenant_id, digest))
    return None if row is None else parse_json(row[0])


def rekey_contract_documents(tx: Tx) -> int:
    """Migration 0016's data step: every stored document moves from the key settlekit gave it before to settld's
    hash of the document as stored, and the old key becomes an alias of the new one. Returns the documents moved.

    The hash is computed here from the stored JSON (canonical JSON, not `contract_hash`), so a document the
    validator of today would refuse still moves and keeps resolving. Runs once, inside the migration's transaction.
    """
    moved = 0
    for tenant_id, old, document_json in tx.fetchall(
            statements("contracts", tx.dialect)["contract_documents"]):
        new = canonical_hash(parse_json(document_json))
        if new == old:
            continue
        taken = tx.scalar(statements("contracts", tx.dialect)["contract_stored"],
                          (tenant_id, new))
        if taken is None:
            tx.execute(statements("contracts", tx.dialect)["rekey_contract"],
                       (new, tenant_id, old))
        else:  # the same document is already stored under its new hash: the old row is a duplicate
            tx.execute(statements("contracts", tx.dialect)["drop_duplicate_contract"], (tenant_id, old))
        tx.execute(statements("contracts", tx.dialect)["add_alias"], (tenant_id, old, new))
        moved += 1
    return moved


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
