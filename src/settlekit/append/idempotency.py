"""Idempotent appends: the key's request hash, the replay of a stored answer, the record written with the events.

The record is inserted in the append's own transaction (`store.idempotency.record`), so it commits atomically
with the events; a concurrent append with the same key waits on the key's unique index, then replays it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from settlekit.append.result import AppendResult
from settlekit.errors import ValidationError
from settlekit.events.canonical import canonical_hash, storable_json
from settlekit.store import idempotency as idempotency_keys
from settlekit.store.db import Database, Tx

SHARED_PRINCIPAL = "anon"
MAX_KEY_LENGTH = 500


@dataclass
class Idempotency:
    key: str
    principal_id: str = SHARED_PRINCIPAL
    endpoint: str = "append"
    request_hash: str | None = None
    ttl_days: int = 30
    # hashes an earlier release gave this very request: a key stored under one of them still replays
    earlier_hashes: tuple[str, ...] = ()

    def scope(self, tenant_id: str) -> idempotency_keys.KeyScope:
        return idempotency_keys.KeyScope(tenant_id, self.principal_id, self.endpoint, self.key)


def prepare(idem: Idempotency, stream_id: str, expected_prev_chain_hash: str | None, expected_version: int | None,
            items: Sequence[Mapping[str, Any]]) -> None:
    """Check the key and fill in the request hash (when the caller did not give one)."""
    if not idem.key or len(idem.key) > MAX_KEY_LENGTH:
        raise ValidationError(f"idempotency key must be 1..{MAX_KEY_LENGTH} characters", code="SCHEMA_INVALID")
    if idem.request_hash is None:
        idem.request_hash = append_request_hash(idem, stream_id, expected_prev_chain_hash, expected_version, items)


def append_request_hash(idem: Idempotency, stream_id: str, expected_prev_chain_hash: str | None,
                        expected_version: int | None, items: Sequence[Mapping[str, Any]]) -> str:
    """The hash that identifies an append request under its key (Python callers; the API hashes its HTTP
    request)."""
    return canonical_hash({
        "endpoint": idem.endpoint, "streamId": stream_id, "expectedPrevChainHash": expected_prev_chain_hash,
        "expectedVersion": expected_version, "body": [dict(i) for i in items],
    })


def replay(db: Database, tenant_id: str, idem: Idempotency) -> AppendResult | None:
    """The stored answer of the append this key completed; None when the key is unused.
    IDEMPOTENCY_KEY_REUSED when the key went with another request."""
    assert idem.request_hash is not None
    with db.query() as tx:
        stored = idempotency_keys.find(tx, idem.scope(tenant_id), idem.request_hash,
                                       conflict_code="IDEMPOTENCY_KEY_REUSED", also=idem.earlier_hashes)
    return None if stored is None else AppendResult.from_json(stored.body, replayed=True)


def record(tx: Tx, tenant_id: str, idem: Idempotency, result: AppendResult, now: datetime) -> None:
    """Store the answer inside the append's transaction."""
    assert idem.request_hash is not None
    idempotency_keys.record(tx, idem.scope(tenant_id), idem.request_hash, 201, storable_json(result.to_json()),
                            now=now, ttl_days=idem.ttl_days)
