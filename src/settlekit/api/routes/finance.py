"""Month close for the key's tenant: close a month (`admin`), read a close, stream its journal and GL batch, the
tenant's GL mapping, and the Merkle log's inclusion and consistency proofs (`jobs:read`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, RootModel
from starlette.responses import Response

from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import context, require
from settlekit.api.openapi import IDEMPOTENT, JSON_VALUE_REF, NO_NUL, PY_SPACE, problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import Verbatim
from settlekit.application import finance as fin
from settlekit.errors import ConfigurationError
from settlekit.ledger.accounts import ACCOUNT_IDS
from settlekit.ledger.journal import GL_MAPPING

router = APIRouter(prefix="/v1/finance", tags=["finance"], route_class=TypedRoute)
MONTH_PATTERN = r"^([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-(0[1-9]|1[0-2])$"  # years 0001-9999
MonthPath = Annotated[str, Path(pattern=MONTH_PATTERN, description="YYYY-MM")]
JobPath = Annotated[str, Path(min_length=1, max_length=200)]


class FinanceMembers(BaseModel):
    """A MonthClose.v1, a proof or a GlMapping.v1 (docs/finance.md gives each format)."""

    model_config = ConfigDict(extra="allow", title="FinanceDocument")


class FinanceDocument(RootModel[Annotated[dict[str, Any], Verbatim(FinanceMembers)]]):
    """A finance document as stored or built (its members in their order), documented as FinanceMembers."""


class GlMappingStored(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenantId: str
    mappingHash: str


def _text(media_type: str, description: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}}


_CLOSE_READ = problems("FINANCE_CLOSE_NOT_FOUND", "FINANCE_CLOSE_MISMATCH")


@router.post("/closes/{month}", summary="Close a month for the tenant (re-running returns the same document)",
             status_code=201, response_model=FinanceDocument, openapi_extra=IDEMPOTENT,
             responses={200: {"model": FinanceDocument, "description": "the month was already closed"},
                        **problems("FINANCE_PERIOD_OPEN", "FINANCE_PERIOD_ORDER", "FINANCE_CLOSE_MISMATCH",
                                   "CONFIGURATION_INVALID")})
def close(month: MonthPath, request: Request, key: ApiKey = require("admin")) -> Response:
    ctx = context(request)
    signer = ctx.appender.server_signer
    if signer is None:
        raise ConfigurationError("the server has no signing key, so it cannot sign a close",
                                 code="CONFIGURATION_INVALID")

    def action() -> tuple[int, FinanceDocument]:
        result = fin.close_month(ctx.db, key.tenant_id, month, signer, now=datetime.now(UTC))
        return (201 if result.created else 200), FinanceDocument(result.document)

    return idempotency.write(request, key, {"month": month}, action)


@router.get("/closes/{month}", summary="The tenant's MonthClose.v1 of a month",
            responses=problems("FINANCE_CLOSE_NOT_FOUND"))
def get_close(month: MonthPath, request: Request, key: ApiKey = require("jobs:read")) -> FinanceDocument:
    return FinanceDocument(fin.get_close(context(request).db, key.tenant_id, month))


@router.get("/closes/{month}/journal.csv", summary="The month's JournalCsv.v1, streamed",
            response_class=StreamingResponse,
            responses={**_text("text/csv", "JournalCsv.v1 bytes"), **_CLOSE_READ})
def journal(month: MonthPath, request: Request, key: ApiKey = require("jobs:read")) -> StreamingResponse:
    db = context(request).db
    doc = fin.get_close(db, key.tenant_id, month)
    return StreamingResponse(fin.iter_journal(db, key.tenant_id, month), media_type="text/csv; charset=utf-8",
                             headers={"X-Content-SHA256": doc["journal"]["sha256"]})


@router.get("/closes/{month}/gl-batch", summary="The month's GlBatch.v1 over the tenant's GL mapping, streamed",
            response_class=StreamingResponse,
            responses={200: {"model": FinanceDocument, "description": "GlBatch.v1, streamed"},
                       **problems("FINANCE_CLOSE_NOT_FOUND", "FINANCE_GL_MAPPING_NOT_FOUND",
                                  "FINANCE_GL_ACCOUNT_UNMAPPED")})
def gl_batch(month: MonthPath, request: Request, key: ApiKey = require("jobs:read")) -> StreamingResponse:
    db = context(request).db
    fin.check_gl_export(db, key.tenant_id, month)
    return StreamingResponse(fin.iter_gl_batch(db, key.tenant_id, month), media_type="application/json")


@router.get("/closes/{month}/proofs/{job_id}", summary="Inclusion proof of a job's leaf in the month's close",
            responses=problems("FINANCE_CLOSE_NOT_FOUND", "FINANCE_LEAF_NOT_FOUND"))
def inclusion(month: MonthPath, job_id: JobPath, request: Request,
              key: ApiKey = require("jobs:read")) -> FinanceDocument:
    return FinanceDocument(fin.inclusion_proof(context(request).db, key.tenant_id, month, job_id))


@router.get("/consistency", summary="Consistency proof between the logs of two closes",
            responses=problems("FINANCE_CLOSE_NOT_FOUND", "FINANCE_MONTH_INVALID"))
def consistency(request: Request, from_month: Annotated[str, Query(alias="from", pattern=MONTH_PATTERN)],
                to_month: Annotated[str, Query(alias="to", pattern=MONTH_PATTERN)],
                key: ApiKey = require("jobs:read")) -> FinanceDocument:
    return FinanceDocument(fin.consistency_proof(context(request).db, key.tenant_id, from_month, to_month))


# not only Python's white space, nor U+0000 (ledger.journal.require_gl_mapping: a non-blank glAccount)
_NON_BLANK = f"^[^\\u0000]*[^\\u0000{PY_SPACE}][^\\u0000]*$"
_OPEN_MEMBERS: dict[str, Any] = {"propertyNames": {"pattern": NO_NUL}, "additionalProperties": {"$ref": JSON_VALUE_REF}}
GL_MAPPING_SCHEMA: dict[str, Any] = {
    "type": "object", "title": "GlMapping", "required": ["schemaVersion", "accounts"], **_OPEN_MEMBERS,
    "description": "A GlMapping.v1 document (docs/finance.md): our account ids to GL accounts.",
    "properties": {
        "schemaVersion": {"const": GL_MAPPING},
        "accounts": {"type": "object", "minProperties": 1, "propertyNames": {"enum": list(ACCOUNT_IDS)},
                     "additionalProperties": {"type": "object", "required": ["glAccount"], **_OPEN_MEMBERS,
                                              "properties": {"glAccount": {"type": "string", "pattern": _NON_BLANK},
                                                             "name": {"$ref": JSON_VALUE_REF}}}},
    },
}


@router.put("/gl-mapping", summary="Store the tenant's chart-of-accounts mapping (GlMapping.v1)",
            response_model=GlMappingStored, responses=problems("FINANCE_GL_MAPPING_INVALID"),
            openapi_extra={**IDEMPOTENT, "requestBody": {"required": True, "content": {
                "application/json": {"schema": GL_MAPPING_SCHEMA}}}})
def put_mapping(body: dict[str, Any], request: Request, key: ApiKey = require("admin")) -> Response:
    db = context(request).db

    def action() -> tuple[int, GlMappingStored]:
        return 200, GlMappingStored(tenantId=key.tenant_id, mappingHash=fin.put_gl_mapping(db, key.tenant_id, body))

    return idempotency.write(request, key, body, action)


@router.get("/gl-mapping", summary="The tenant's GL mapping", responses=problems("FINANCE_GL_MAPPING_NOT_FOUND"))
def get_mapping(request: Request, key: ApiKey = require("jobs:read")) -> FinanceDocument:
    return FinanceDocument(fin.get_gl_mapping(context(request).db, key.tenant_id))
