"""Artifact rows (04-artifacts.md §10), written once for both backends against `Tx`: the insert that never
overwrites, the reads of what a new artifact may conflict with, and the queries the effective artifact is chosen
from. The rules (reuse, conflicts, the quota, which artifact is effective) are the artifacts consumer's
(`projections/artifact_store.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from settlekit.artifacts.types import require_artifact_type
from settlekit.errors import ValidationError
from settlekit.events.canonical import parse_json
from settlekit.store.database import Row, Tx
from settlekit.store.sql import and_where, statements

_COLUMNS: Final = (
    "tenant_id, artifact_id, job_id, artifact_type, source_event_id, source_chain_hash, artifact_hash,"
    " job_version, artifact_json, generated_at, created_at"
)
MAX_PAGE: Final = 1000


@dataclass(frozen=True)
class StoredArtifact:
    tenant_id: str
    artifact_id: str
    job_id: str
    artifact_type: str
    source_event_id: str
    source_chain_hash: str
    artifact_hash: str
    job_version: int
    artifact_json: str
    generated_at: str
    created_at: Any

    @property
    def artifact(self) -> dict[str, Any]:
        """The stored document (with artifactHash), parsed with JS number semantics."""
        value: dict[str, Any] = parse_json(self.artifact_json)
        return value


@dataclass(frozen=True)
class PutResult:
    stored: StoredArtifact
    created: bool


@dataclass(frozen=True)
class ArtifactPage:
    items: list[StoredArtifact]
    next_cursor: str | None


def _row(r: Row) -> StoredArtifact:
    return StoredArtifact(r[0], r[1], r[2], r[3], r[4], r[5], r[6], int(r[7]), r[8], r[9], r[10])


def insert(tx: Tx, tenant_id: str, artifact_id: str, job_id: str, artifact_type: str, source_event_id: str,
           anchor: str, artifact_hash: str, job_version: int, artifact_json: str, generated_at: str) -> Any:
    """Insert an artifact unless one of the same id or the same (job, type, source event) is stored: its
    `created_at`, or None when nothing was inserted."""
    inserted = tx.fetchone(
        statements("artifacts", tx.dialect)["insert"],
        (tenant_id, artifact_id, job_id, artifact_type, source_event_id, anchor, artifact_hash, job_version,
         artifact_json, generated_at))
    return None if inserted is None else inserted[0]


def same_id_or_source(tx: Tx, tenant_id: str, artifact_id: str, job_id: str, artifact_type: str,
                      source_event_id: str) -> list[StoredArtifact]:
    """What a new artifact may conflict with, in one statement: the artifact of the same id, and the one of its type
    for the same source event."""
    return [_row(r) for r in tx.fetchall(
        f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND (artifact_id = ?"
        " OR (job_id = ? AND artifact_type = ? AND source_event_id = ?))",
        (tenant_id, artifact_id, job_id, artifact_type, source_event_id))]


def count_of_type(tx: Tx, tenant_id: str, job_id: str, artifact_type: str) -> int:
    """How many artifacts of a type the job has."""
    return int(tx.scalar(statements("artifacts", tx.dialect)["count_of_type"], (tenant_id, job_id, artifact_type)))


def get(tx: Tx, tenant_id: str, artifact_id: str) -> StoredArtifact | None:
    row = tx.fetchone(f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND artifact_id = ?",
                      (tenant_id, artifact_id))
    return None if row is None else _row(row)


def list_for_job(tx: Tx, tenant_id: str, job_id: str, *, artifact_type: str | None = None,
                 source_event_id: str | None = None, after: str | None = None, limit: int = 100) -> ArtifactPage:
    """A job's artifacts in stream order (jobVersion, then artifactId); keyset pagination with the opaque
    `next_cursor` passed back as `after`."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValidationError(f"limit must be 1..{MAX_PAGE}", code="SCHEMA_INVALID")
    sql = f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND job_id = ?"
    params: list[Any] = [tenant_id, job_id]
    checked_type = None if artifact_type is None else require_artifact_type(artifact_type)
    sql = and_where(sql, params, [("artifact_type = ?", checked_type), ("source_event_id = ?", source_event_id)])
    if after is not None:
        version, artifact_id = _decode_cursor(after)
        sql += " AND (job_version > ? OR (job_version = ? AND artifact_id > ?))"
        params += [version, version, artifact_id]
    sql += " ORDER BY job_version, artifact_id LIMIT ?"
    params.append(limit + 1)
    rows = [_row(r) for r in tx.fetchall(sql, params)]
    more = len(rows) > limit
    items = rows[:limit]
    cursor = f"{items[-1].job_version}:{items[-1].artifact_id}" if more and items else None
    return ArtifactPage(items, cursor)


def at_source(tx: Tx, tenant_id: str, job_id: str, artifact_type: str, source_event_id: str) -> StoredArtifact | None:
    """The job's artifact of a type sourced at an event."""
    row = tx.fetchone(
        f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND job_id = ? AND artifact_type = ?"
        " AND source_event_id = ?", (tenant_id, job_id, artifact_type, source_event_id))
    return None if row is None else _row(row)


def latest_of_type(tx: Tx, tenant_id: str, job_id: str, artifact_type: str) -> StoredArtifact | None:
    """The job's artifact of a type with the highest jobVersion (then artifactId)."""
    row = tx.fetchone(
        f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND job_id = ? AND artifact_type = ?"
        " ORDER BY job_version DESC, artifact_id DESC LIMIT 1", (tenant_id, job_id, artifact_type))
    return None if row is None else _row(row)


def last_settled_event(tx: Tx, tenant_id: str, job_id: str) -> str | None:
    """The id of the job's last SETTLED event."""
    settled_id = tx.scalar(statements("artifacts", tx.dialect)["latest_settled"], (tenant_id, job_id))
    return None if settled_id is None else str(settled_id)


def last_completion(tx: Tx, tenant_id: str, job_id: str) -> Row | None:
    """(seq, chain hash) of the job's latest completion event."""
    return tx.fetchone(statements("artifacts", tx.dialect)["last_completion"], (tenant_id, job_id))


def proofs_after(tx: Tx, tenant_id: str, job_id: str, seq: int) -> list[tuple[str, dict[str, Any]]]:
    """(event id, event) of the job's PROOF_EVALUATED events after `seq`, latest first."""
    return [(str(event_id), parse_json(text)) for event_id, text in
            tx.fetchall(statements("artifacts", tx.dialect)["latest_proofs_after"], (tenant_id, job_id, seq))]


def _decode_cursor(cursor: str) -> tuple[int, str]:
    version, sep, artifact_id = cursor.partition(":")
    if not sep or not version.isascii() or not version.isdigit() or int(version) > _MAX_INT64:
        raise ValidationError("invalid artifact cursor", code="CURSOR_INVALID")
    return int(version), artifact_id


_MAX_INT64 = 2**63 - 1


# ---------------------------------------------------------------------------------------------------------------
# What the artifacts consumer (`settlekit.projections.artifacts`) reads and writes besides artifacts: the job's
# events (by append batch, by range), its saved per-job fold state and the outbox table.


def event_batch_id(tx: Tx, tenant_id: str, stream_id: str, seq: int) -> Any:
    """The append batch of the event at `seq`."""
    return tx.scalar(statements("artifacts", tx.dialect)["event_batch_id"],
                     (tenant_id, stream_id, seq))


def batch_risk_scored(tx: Tx, tenant_id: str, stream_id: str, batch_id: Any) -> list[Row]:
    """(seq, event_json) of the RISK_SCORED events of one append batch, in stream order."""
    return tx.fetchall(
        statements("artifacts", tx.dialect)["batch_risk_scored"], (tenant_id, stream_id, batch_id))


def batch_booked(tx: Tx, tenant_id: str, stream_id: str, event_id: str, batch_id: Any) -> Row | None:
    """(seq, event_json) of the BOOKED event `event_id` if it belongs to append batch `batch_id`."""
    return tx.fetchone(
        statements("artifacts", tx.dialect)["batch_booked"], (tenant_id, stream_id, event_id, batch_id))


def events_between(tx: Tx, tenant_id: str, stream_id: str, after_seq: int, through_seq: int) -> list[Row]:
    """(seq, event_json) of the stream's events in (after_seq, through_seq], in order."""
    return tx.fetchall(
        statements("artifacts", tx.dialect)["events_between"], (tenant_id, stream_id, after_seq, through_seq))


def load_job_state(tx: Tx, tenant_id: str, job_id: str) -> Row | None:
    """(seq, state_json) of the consumer's saved fold of a job, or None."""
    return tx.fetchone(statements("artifacts", tx.dialect)["load_job_state"],
                       (tenant_id, job_id))


def save_job_state(tx: Tx, tenant_id: str, job_id: str, seq: int, state_json: str) -> None:
    tx.execute(statements("artifacts", tx.dialect)["save_job_state"], (tenant_id, job_id, seq, state_json))



def load_artifact_json(tx: Tx, tenant_id: str, artifact_id: str) -> Any:
    """The stored `artifact_json` of one artifact as the driver returns it (JSONB or text), or None."""
    return tx.scalar(statements("artifacts", tx.dialect)["load_artifact_json"],
                     (tenant_id, artifact_id))
