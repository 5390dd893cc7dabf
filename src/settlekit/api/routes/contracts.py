"""Contract documents (ContractDocument.v1) that jobs pin by hash (docs/contracts.md): register one, as
`settlekit contracts add` does, and read one back by its hash or by the hash an earlier settlekit gave it.
Registering needs `admin`, reading `ops`. A tenant sees only its own documents."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import context, require
from settlekit.api.guards import parse_body
from settlekit.api.openapi import IDEMPOTENT, problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import ContractDocument, ContractRegistered
from settlekit.application.contracts import get_contract, store_contract
from settlekit.errors import NotFoundError
from settlekit.events.canonical import canonical_hash
from settlekit.ledger import compile_contract_policy

router = APIRouter(prefix="/v1", tags=["ops"], route_class=TypedRoute)
ContractHashPath = Annotated[str, Path(pattern="^[0-9a-f]{64}$", description="a contract hash (64 lowercase hex)")]

_DOCUMENT_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "description": "A ContractDocument.v1 (docs/contracts.md). Its numbers are read as "
                                     "JavaScript reads them, so the hash is settld's."}}}}}


@router.post("/contracts", status_code=201, summary="Register a contract document (ContractDocument.v1)",
             response_model=ContractRegistered, openapi_extra={**_DOCUMENT_BODY, **IDEMPOTENT},
             responses={200: {"model": ContractRegistered, "description": "the document was registered before"},
                        **problems("CONTRACT_INVALID", "JSON_INVALID")})
async def register_contract(request: Request, key: ApiKey = require("admin")) -> Response:
    document = parse_body(await request.body())
    db = context(request).db

    def action() -> tuple[int, ContractRegistered]:
        stored = store_contract(db, key.tenant_id, document)
        template, policy_hash, compiler_id = compile_contract_policy(document)
        return (201 if stored.created else 200), ContractRegistered(
            tenantId=key.tenant_id, contractHash=stored.contract_hash, policyHash=policy_hash,
            compilerId=compiler_id, splitPlanHash=template["connect"]["splitPlanHash"])

    return await run_in_threadpool(idempotency.write, request, key, document, action)


@router.get("/contracts/{contract_hash}", summary="A registered contract document",
            responses=problems("CONTRACT_NOT_FOUND"))
def read_contract(contract_hash: ContractHashPath, request: Request, key: ApiKey = require("ops")) -> ContractDocument:
    document = get_contract(context(request).db, key.tenant_id, contract_hash)
    if document is None:
        raise NotFoundError(f"no contract document with hash {contract_hash} is registered",
                            code="CONTRACT_NOT_FOUND", contractHash=contract_hash)
    return ContractDocument(tenantId=key.tenant_id, contractHash=canonical_hash(document), document=document)
