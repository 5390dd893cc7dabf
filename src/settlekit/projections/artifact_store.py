"""The artifact rules (04-artifacts.md §10) over the artifact rows of `store/artifacts.py`.

Writes never overwrite: storing an identical artifact again is a reuse; a different hash under the same id is
ARTIFACT_HASH_MISMATCH; another artifact for the same (job, type, source event) is
ARTIFACT_SOURCE_EVENT_CONFLICT. The quota `max_artifacts_per_job_type` (0 = unlimited) caps new rows per
(tenant, job, type). The effective artifact of a type is the one a job's settlement or its last evaluated proof
names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from settlekit.artifacts.builders import compute_artifact_hash
from settlekit.artifacts.types import PROOF_RECEIPT, SETTLEMENT_STATEMENT, WORK_CERTIFICATE, require_artifact_type
from settlekit.errors import ConflictError, SettlekitError, ValidationError
from settlekit.events.canonical import storable_json
from settlekit.store import artifacts as rows
from settlekit.store.artifacts import ArtifactPage, StoredArtifact
from settlekit.store.database import Tx


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
class PutResult:
    stored: StoredArtifact
    created: bool


QuotaSetting = int | Callable[[str], int]


def _require_str(artifact: Mapping[str, Any], key: str) -> str:
    v = artifact.get(key)
    if type(v) is not str or not v:
        raise ValidationError(f"artifact.{key} must be a non-empty string", code="ARTIFACT_INVALID", field=key)
    return v


class ArtifactStore:
    """The artifacts of a database under the rules above; every method runs in the caller's transaction."""

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
        current = rows.count_of_type(tx, tenant_id, job_id, artifact_type)
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
        text = storable_json(dict(artifact))  # a lone surrogate (imported history) stored as its escape
        created_at = rows.insert(tx, tenant_id, artifact_id, job_id, a_type, source_event_id, anchor, a_hash,
                                 version, text, generated_at)
        if created_at is None:  # stored before (or by a concurrent insert): identical means reuse, else a conflict
            existing = self._reusable(tx, tenant_id, artifact_id, a_type, job_id, source_event_id, anchor, a_hash)
            if existing is None:
                raise ArtifactCorrupt("artifact insert conflicted but no conflicting row is visible",
                                      artifactId=artifact_id)
            return PutResult(existing, False)
        # the row as `get` would read it back, without reading it back
        return PutResult(StoredArtifact(tenant_id, artifact_id, job_id, a_type, source_event_id, anchor, a_hash,
                                        version, text, generated_at, created_at), True)

    def _reusable(self, tx: Tx, tenant_id: str, artifact_id: str, a_type: str, job_id: str,
                  source_event_id: str, anchor: str, a_hash: str) -> StoredArtifact | None:
        """The identical stored artifact, None when nothing conflicts, else raise the conflict."""
        found = rows.same_id_or_source(tx, tenant_id, artifact_id, job_id, a_type, source_event_id)
        same_id = next((r for r in found if r.artifact_id == artifact_id), None)
        if same_id is not None:
            self.check_reuse(same_id, a_type, anchor)
            if same_id.artifact_hash != a_hash:
                raise ArtifactConflict(
                    f"artifact {artifact_id} already exists with a different hash", code="ARTIFACT_HASH_MISMATCH",
                    artifactId=artifact_id, storedHash=same_id.artifact_hash, newHash=a_hash)
            return same_id
        if found:
            other = found[0]
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
        return rows.get(tx, tenant_id, artifact_id)

    def list_for_job(self, tx: Tx, tenant_id: str, job_id: str, *, artifact_type: str | None = None,
                     source_event_id: str | None = None, after: str | None = None, limit: int = 100) -> ArtifactPage:
        """A job's artifacts in stream order (jobVersion, then artifactId); keyset pagination with the opaque
        `next_cursor` passed back as `after`."""
        return rows.list_for_job(tx, tenant_id, job_id, artifact_type=artifact_type,
                                 source_event_id=source_event_id, after=after, limit=limit)

    def effective(self, tx: Tx, tenant_id: str, job_id: str, artifact_type: str) -> StoredArtifact | None:
        """The effective artifact of a type (§10): for WorkCertificate, SettlementStatement and ProofReceipt the
        one sourced at the job's last SETTLED event, else at the latest PROOF_EVALUATED anchored at the latest
        completion; for the other types the latest one (highest jobVersion)."""
        a_type = require_artifact_type(artifact_type)
        if a_type in (WORK_CERTIFICATE, SETTLEMENT_STATEMENT, PROOF_RECEIPT):
            source = self._effective_source(tx, tenant_id, job_id, settled=a_type != PROOF_RECEIPT)
            return None if source is None else rows.at_source(tx, tenant_id, job_id, a_type, source)
        return rows.latest_of_type(tx, tenant_id, job_id, a_type)

    def _effective_source(self, tx: Tx, tenant_id: str, job_id: str, *, settled: bool) -> str | None:
        if settled:
            settled_id = rows.last_settled_event(tx, tenant_id, job_id)
            if settled_id is not None:
                return settled_id
        completion = rows.last_completion(tx, tenant_id, job_id)
        if completion is None:
            return None
        for event_id, event in rows.proofs_after(tx, tenant_id, job_id, completion[0]):
            payload = event.get("payload")
            if type(payload) is dict and payload.get("evaluatedAtChainHash") == completion[1]:
                return event_id
        return None
