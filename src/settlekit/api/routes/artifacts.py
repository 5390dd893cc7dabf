"""Artifacts: a job's artifacts in stream order, the effective artifact of a type, one artifact document."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from settlekit.api.auth import ApiKey
from settlekit.api.deps import ArtifactIdPath, PageLimit, TextIdPath, context, job_head, require
from settlekit.api.openapi import problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import Artifact, ArtifactList, ArtifactSummary
from settlekit.artifacts.types import ARTIFACT_TYPES
from settlekit.errors import NotFoundError

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=TypedRoute)
# the names `type` takes (with or without the `.v1`); any other answers 400 ARTIFACT_TYPE_UNKNOWN
_TYPE_NAMES = {"enum": [*ARTIFACT_TYPES, *(name.removesuffix(".v1") for name in ARTIFACT_TYPES)]}


def _artifact_summary(a: Any) -> ArtifactSummary:
    """A stored artifact's row (store.artifacts.StoredArtifact) as listed."""
    return ArtifactSummary(artifactId=a.artifact_id, artifactType=a.artifact_type, artifactHash=a.artifact_hash,
                           jobId=a.job_id, jobVersion=a.job_version, sourceEventId=a.source_event_id,
                           sourceChainHash=a.source_chain_hash, generatedAt=a.generated_at)


@router.get("/jobs/{job_id}/artifacts", summary="A job's artifacts in stream order",
            responses=problems("JOB_NOT_FOUND", "CURSOR_INVALID", "ARTIFACT_TYPE_UNKNOWN"))
def list_artifacts(job_id: TextIdPath, request: Request, key: ApiKey = require("jobs:read"),
                   type: Annotated[str | None, Query(max_length=64, json_schema_extra=_TYPE_NAMES)] = None,
                   sourceEventId: Annotated[str | None, Query(max_length=200)] = None,
                   limit: PageLimit = 100,
                   cursor: Annotated[str | None, Query(max_length=400)] = None) -> ArtifactList:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    with ctx.db.read() as tx:
        page = ctx.artifacts.list_for_job(tx, key.tenant_id, job_id, artifact_type=type,
                                          source_event_id=sourceEventId, after=cursor, limit=limit)
    return ArtifactList(jobId=job_id, artifacts=[_artifact_summary(a) for a in page.items],
                        nextCursor=page.next_cursor)


@router.get("/jobs/{job_id}/artifacts/effective", summary="The effective artifact of a type for a job",
            responses=problems("JOB_NOT_FOUND", "ARTIFACT_NOT_FOUND", "ARTIFACT_TYPE_UNKNOWN"))
def effective_artifact(job_id: TextIdPath, request: Request,
                       type: Annotated[str, Query(max_length=64, json_schema_extra=_TYPE_NAMES)],
                       key: ApiKey = require("jobs:read")) -> Artifact:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    with ctx.db.read() as tx:
        found = ctx.artifacts.effective(tx, key.tenant_id, job_id, type)
    if found is None:
        raise NotFoundError(f"job {job_id} has no effective {type}", code="ARTIFACT_NOT_FOUND", jobId=job_id,
                            artifactType=type)
    return Artifact(found.artifact)


@router.get("/artifacts/{artifact_id}", summary="One artifact document", responses=problems("ARTIFACT_NOT_FOUND"))
def get_artifact(artifact_id: ArtifactIdPath, request: Request, key: ApiKey = require("jobs:read")) -> Artifact:
    ctx = context(request)
    with ctx.db.read() as tx:
        found = ctx.artifacts.get(tx, key.tenant_id, artifact_id)
    if found is None:
        raise NotFoundError(f"artifact {artifact_id} not found", code="ARTIFACT_NOT_FOUND", artifactId=artifact_id)
    return Artifact(found.artifact)
