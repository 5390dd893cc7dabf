"""Glue between the artifacts area (spec 04) and deliveries (spec 06 §2).

`WebhookDeliverySink` satisfies the artifacts outbox `DeliverySink` protocol
(`enqueue(tx, tenant_id, artifact_row) -> int`): in the transaction that stores an artifact it creates one
delivery per active destination of the tenant whose artifact-type filter matches. `artifact_loader` reads a
stored artifact back for the delivery worker.

The outbox passes the stored artifact document itself; a row of the artifacts table (migration 0004:
tenant_id, artifact_id, job_id, artifact_type, artifact_hash, artifact_json TEXT, …), as a mapping or an object,
is accepted too and checked against its columns.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.errors import SettlekitError, ValidationError
from settlekit.events.canonical import parse_json
from settlekit.store.artifacts import load_artifact_json
from settlekit.store.db import Tx


class ArtifactRowError(ValidationError):
    code = "ARTIFACT_ROW_INVALID"
    status = 500


def _field(row: Any, name: str) -> Any:
    if isinstance(row, Mapping):
        return row.get(name)
    return getattr(row, name, None)


def _as_doc(value: Any) -> dict[str, Any]:
    """artifact_json as stored: JSONB (already a dict on PostgreSQL), TEXT or bytes."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("utf-8")
    if isinstance(value, str):
        try:
            doc = parse_json(value)
        except (ValueError, SettlekitError) as exc:
            raise ArtifactRowError("artifact_json is not valid JSON") from exc
        if isinstance(doc, dict):
            return doc
    raise ArtifactRowError("artifact_json is not a JSON object")


def artifact_document(artifact_row: Any) -> dict[str, Any]:
    """The artifact document of an artifacts row (or the document itself), checked against the row's
    `artifact_hash` / `artifact_type` / `artifact_id` columns when present."""
    if isinstance(artifact_row, Mapping) and "artifactType" in artifact_row and "artifactHash" in artifact_row:
        return dict(artifact_row)
    raw = _field(artifact_row, "artifact_json")
    if raw is None:
        raise ArtifactRowError("artifact row has no artifact_json")
    doc = _as_doc(raw)
    for column, key in (
        ("artifact_hash", "artifactHash"),
        ("artifact_type", "artifactType"),
        ("artifact_id", "artifactId"),
    ):
        expected = _field(artifact_row, column)
        if expected is not None and not hmac.compare_digest(str(expected), str(doc.get(key, ""))):
            raise ArtifactRowError(f"artifact row {column} differs from artifact_json.{key}", column=column)
    return doc


class WebhookDeliverySink:
    """`DeliverySink` for the artifacts outbox: `enqueue(tx, tenant_id, artifact_row) -> deliveries created`.

    Re-enqueueing the same artifact is a no-op (dedupe key); `max_pending` enforces the tenant quota
    (`TENANT_QUOTA_EXCEEDED`, which rolls the artifact's transaction back with it). `on_enqueued` is called
    after rows were created (e.g. `worker.wake` — the worker sees them once the transaction commits).
    """

    def __init__(
        self,
        *,
        max_pending: int | None = None,
        clock: Callable[[], datetime] | None = None,
        on_enqueued: Callable[[], None] | None = None,
    ):
        self.max_pending = max_pending
        self.clock = clock or (lambda: datetime.now(UTC))
        self.on_enqueued = on_enqueued

    def enqueue(self, tx: Tx, tenant_id: str, artifact_row: Any) -> int:
        doc = artifact_document(artifact_row)
        created = enqueue_artifact(tx, tenant_id, doc, now=self.clock(), max_pending=self.max_pending)
        if created and self.on_enqueued is not None:
            self.on_enqueued()
        return created


def artifact_loader(tx: Tx, tenant_id: str, artifact_id: str) -> dict[str, Any] | None:
    """The stored artifact document, or None (the worker then fails the attempt with `missing_artifact`)."""
    stored = load_artifact_json(tx, tenant_id, artifact_id)
    return None if stored is None else _as_doc(stored)
