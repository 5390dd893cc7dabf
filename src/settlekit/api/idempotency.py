"""Idempotency keys for API writes that are not event appends (appends record theirs inside the event
transaction, see EventStore). Only successful responses are recorded; a replay returns the stored status and
body with `Idempotent-Replayed: true`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from settlekit.api.http import JsonResponse, dumps
from settlekit.errors import ConflictError
from settlekit.events.canonical import canonical_hash, parse_json
from settlekit.store.db import Database

TTL_DAYS = 30


def request_hash(method: str, path: str, body: Any, expected_prev_chain_hash: Any = None) -> str:
    """Spec 01 §9: sha256 of canonical({method, path, expectedPrevChainHash, body})."""
    return canonical_hash({"method": method, "path": path, "expectedPrevChainHash": expected_prev_chain_hash,
                           "body": body})


def replayed(status: int, body: Any) -> JsonResponse:
    return JsonResponse(body, status_code=status, headers={"Idempotent-Replayed": "true"})


def run(db: Database, *, tenant_id: str, principal_id: str, method: str, path: str, key: str | None, body: Any,
        action: Callable[[], tuple[int, Any]]) -> JsonResponse:
    """Run `action` once per (tenant, principal, "METHOD path", key)."""
    if key is None:
        status, out = action()
        return JsonResponse(out, status_code=status)
    endpoint = f"{method} {path}"
    hashed = request_hash(method, path, body)
    with db.read() as tx:
        row = tx.fetchone("SELECT request_hash, status_code, response_json FROM idempotency_keys"
                          " WHERE tenant_id = ? AND principal_id = ? AND endpoint = ? AND idem_key = ?",
                          (tenant_id, principal_id, endpoint, key))
    if row is not None:
        if row[0] != hashed:
            raise ConflictError("idempotency key was used with a different request", code="IDEMPOTENCY_CONFLICT",
                                idempotencyKey=key)
        return replayed(int(row[1]), parse_json(row[2]))
    status, out = action()
    expires = (datetime.now(UTC) + timedelta(days=TTL_DAYS)).isoformat()
    with db.transaction() as tx:
        tx.execute("INSERT INTO idempotency_keys (tenant_id, principal_id, endpoint, idem_key, request_hash,"
                   " status_code, response_json, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                   " ON CONFLICT DO NOTHING",
                   (tenant_id, principal_id, endpoint, key, hashed, status, dumps(out).decode("utf-8"), expires))
    return JsonResponse(out, status_code=status)
