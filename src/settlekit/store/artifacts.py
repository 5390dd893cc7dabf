"""Artifact repository (04-artifacts.md §10), written once for both backends against `Tx`.

Writes never overwrite: storing an identical artifact again is a reuse; a different hash under the same id is
ARTIFACT_HASH_MISMATCH; another artifact for the same (job, type, source event) is
ARTIFACT_SOURCE_EVENT_CONFLICT. The quota `max_artifacts_per_job_type` (0 = unlimited) caps new rows per
(tenant, job, type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from settlekit.artifacts.builders import compute_artifact_hash
from settlekit.artifacts.types import PROOF_RECEIPT, SETTLEMENT_STATEMENT, WORK_CERTIFICATE, require_artifact_type
from settlekit.errors import ConflictError, SettlekitError, ValidationError
from settlekit.events.canonical import parse_json, storable_json
from settlekit.store.database import Row, Tx
from settlekit.store.sql import and_where, statements

_COLUMNS: Final = (
    "tenant_id, artifact_id, job_id, artifact_type, source_event_id, source_chain_hash, artifact_hash,"
    " job_version, artifact_json, generated_at, created_at"
)
MAX_PAGE: Final = 1000


class ArtifactConflict(ConflictError):
    """An artifact write that would change a stored artifact. `code` names the rule."""

    code = "ARTIFACT_CONFLICT"


class ArtifactQuotaExceeded(SettlekitError):
    code = "ARTIFACT_QUOTA_EXCEEDED"
    status = 429


class ArtifactCorrupt(SettlekitError):
    code = "ARTIFACT_CORRUPT"
    status = 500


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


def _dumps(value: Any) -> str:
    return storable_json(value)  # a lone surrogate (imported history) stored as its escape


def _require_str(artifact: Mapping[str, Any], key: str) -> str:
    v = artifact.get(key)
    if type(v) is not str or not v:
        raise ValidationError(f"artifact.{key} must be a non-empty string", code="ARTIFACT_INVALID", field=key)
    return v


QuotaSetting = int | Callable[[str], int]


class ArtifactStore:
    """Repository over the `artifacts` table; every method runs in the caller's transaction."""

    def __init__(self, *, max_artifacts_per_job_type: QuotaSetting = 0):
        self._quota = max_artifacts_per_job_type

    def quota_for(self, tenant_id: str) -> int:
        q = self._quota(tenant_id) if callable(self._quota) else self._quota
        return max(int(q), 0)

    # ------------------------------------------------------------------ writes

    def check_quota(self, tx: Tx, tenant_id: str, job_id: str, artifact_type: str) -> None:
        """Raise ARTIFACT_QUOTA_EXCEEDED when the job already has the maximum of this type."""
        limit = self.quota_for(tenant_id)
        if limit == 0:
            return
        current = int(tx.scalar(
            statements("artifacts", tx.dialect)["check_quota"],
            (tenant_id, job_id, artifact_type)))
        if current >= limit:
            raise ArtifactQuotaExceeded(
                f"job {job_id} already has {current} {artifact_type} artifacts (limit {limit})",
                kind="artifacts_per_job_type", limit=limit, current=current, jobId=job_id, artifactType=artifact_type)

    def put(self, tx: Tx, tenant_id: str, artifact: Mapping[str, Any]) -> PutResult:
        """Store an artifact (with its artifactHash) or reuse the identical stored one."""
        artifact_id = _require_str(artifact, "artifactId")
        a_type = require_artifact_type(artifact.get("artifactType"))
        job_id = _require_str(artifact, "jobId")
        source_event_id = _require_str(artifact, "sourceEventId")
        anchor = _require_str(artifact, "atChainHash")
        generated_at = _require_str(artifact, "generatedAt")
        a_hash = _require_str(artifact, "artifactHash")
        if artifact.get("tenantId") != tenant_id:
            raise ValidationError("artifact.tenantId does not match the tenant", code="ARTIFACT_INVALID")
        core = {k: v for k, v in artifact.items() if k != "artifactHash"}
        if compute_artifact_hash(core) != a_hash:
            raise ValidationError("artifactHash does not match the artifact", code="ARTIFACT_HASH_INVALID",
                                  artifactId=artifact_id)
        version: Any = artifact.get("jobVersion")
        if type(version) is not int or version < 1:
            raise ValidationError("artifact.jobVersion must be a positive integer", code="ARTIFACT_INVALID")
        if self.quota_for(tenant_id):  # an identical stored artifact is reused even when the quota is full
            existing = self._reusable(tx, tenant_id, artifact_id, a_type, job_id, source_event_id, anchor, a_hash)
            if existing is not None:
                return PutResult(existing, False)
            self.check_quota(tx, tenant_id, job_id, a_type)
        # without a quota the insert comes first: it adds nothing on a conflict, which is then read and judged
        text = _dumps(dict(artifact))
        inserted = tx.fetchone(
            statements("artifacts", tx.dialect)["put"],
            (tenant_id, artifact_id, job_id, a_type, source_event_id, anchor, a_hash, version, text, generated_at))
        if inserted is None:  # stored before (or by a concurrent insert): identical means reuse, else a conflict
            existing = self._reusable(tx, tenant_id, artifact_id, a_type, job_id, source_event_id, anchor, a_hash)
            if existing is None:
                raise ArtifactCorrupt("artifact insert conflicted but no conflicting row is visible",
                                      artifactId=artifact_id)
            return PutResult(existing, False)
        # the row as `get` would read it back, without reading it back
        return PutResult(StoredArtifact(tenant_id, artifact_id, job_id, a_type, source_event_id, anchor, a_hash,
                                        version, text, generated_at, inserted[0]), True)

    def _reusable(self, tx: Tx, tenant_id: str, artifact_id: str, a_type: str, job_id: str,
                  source_event_id: str, anchor: str, a_hash: str) -> StoredArtifact | None:
        """The identical stored artifact, None when nothing conflicts, else raise the conflict. One statement reads
        both what may conflict: the artifact of the same id, and the one of its type for the same source event."""
        rows = [_row(r) for r in tx.fetchall(
            f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND (artifact_id = ?"
            " OR (job_id = ? AND artifact_type = ? AND source_event_id = ?))",
            (tenant_id, artifact_id, job_id, a_type, source_event_id))]
        same_id = next((r for r in rows if r.artifact_id == artifact_id), None)
        if same_id is not None:
            self.check_reuse(same_id, a_type, anchor)
            if same_id.artifact_hash != a_hash:
                raise ArtifactConflict(
                    f"artifact {artifact_id} already exists with a different hash", code="ARTIFACT_HASH_MISMATCH",
                    artifactId=artifact_id, storedHash=same_id.artifact_hash, newHash=a_hash)
            return same_id
        if rows:
            other = rows[0]
            raise ArtifactConflict(
                f"{a_type} for source event {source_event_id} already exists as {other.artifact_id}",
                code="ARTIFACT_SOURCE_EVENT_CONFLICT", artifactId=artifact_id, storedArtifactId=other.artifact_id,
                sourceEventId=source_event_id)
        return None

    @staticmethod
    def check_reuse(stored: StoredArtifact, artifact_type: str, anchor: str | None) -> None:
        """A stored artifact may be reused for a task only with the same type and anchor, and a hash (§10.2)."""
        if stored.artifact_type != artifact_type:
            raise ArtifactConflict(
                f"artifact {stored.artifact_id} exists with type {stored.artifact_type}",
                code="ARTIFACT_TYPE_CONFLICT", artifactId=stored.artifact_id)
        if anchor is not None and stored.source_chain_hash != anchor:
            raise ArtifactConflict(
                f"artifact {stored.artifact_id} exists at another anchor", code="ARTIFACT_ANCHOR_CONFLICT",
                artifactId=stored.artifact_id, storedAtChainHash=stored.source_chain_hash, atChainHash=anchor)
        if not stored.artifact_hash:
            raise ArtifactCorrupt(f"artifact {stored.artifact_id} has no hash", artifactId=stored.artifact_id)

    # ------------------------------------------------------------------ reads

    def get(self, tx: Tx, tenant_id: str, artifact_id: str) -> StoredArtifact | None:
        row = tx.fetchone(f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND artifact_id = ?",
                          (tenant_id, artifact_id))
        return None if row is None else _row(row)

    def list_for_job(
        self,
        tx: Tx,
        tenant_id: str,
        job_id: str,
        *,
        artifact_type: str | None = None,
        source_event_id: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> ArtifactPage:
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

    def effective(self, tx: Tx, tenant_id: str, job_id: str, artifact_type: str) -> StoredArtifact | None:
        """The effective artifact of a type (§10): for WorkCertificate, SettlementStatement and ProofReceipt the
        one sourced at the job's last SETTLED event, else at the latest PROOF_EVALUATED anchored at the latest
        completion; for the other types the latest one (highest jobVersion)."""
        a_type = require_artifact_type(artifact_type)
        if a_type in (WORK_CERTIFICATE, SETTLEMENT_STATEMENT, PROOF_RECEIPT):
            source = self._effective_source(tx, tenant_id, job_id, settled=a_type != PROOF_RECEIPT)
            if source is None:
                return None
            row = tx.fetchone(
                f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND job_id = ? AND artifact_type = ?"
                " AND source_event_id = ?", (tenant_id, job_id, a_type, source))
            return None if row is None else _row(row)
        row = tx.fetchone(
            f"SELECT {_COLUMNS} FROM artifacts WHERE tenant_id = ? AND job_id = ? AND artifact_type = ?"
            " ORDER BY job_version DESC, artifact_id DESC LIMIT 1", (tenant_id, job_id, a_type))
        return None if row is None else _row(row)

    def _effective_source(self, tx: Tx, tenant_id: str, job_id: str, *, settled: bool) -> str | None:
        if settled:
            settled_id = tx.scalar(
                statements("artifacts", tx.dialect)["latest_settled"], (tenant_id, job_id))
            if settled_id is not None:
                return str(settled_id)
        completion = tx.fetchone(
            statements("artifacts", tx.dialect)["effective_source"],
            (tenant_id, job_id))
        if completion is None:
            return None
        proofs = tx.fetchall(
            statements("artifacts", tx.dialect)["latest_proofs_after"], (tenant_id, job_id, completion[0]))
        for event_id, text in proofs:
            payload = parse_json(text).get("payload")
            if type(payload) is dict and payload.get("evaluatedAtChainHash") == completion[1]:
                return str(event_id)
        return None


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
