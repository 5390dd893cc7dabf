"""The tenant's ledger: balances per account, and a job's journal entries and party allocations."""

from __future__ import annotations

from fastapi import APIRouter, Request

from settlekit.api.auth import ApiKey
from settlekit.api.deps import context, job_head, require
from settlekit.api.openapi import problems
from settlekit.api.responses import JsonResponse
from settlekit.api.schemas import Allocations, Balances, LedgerEntries
from settlekit.store import ledger as ledger_rows

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.get("/ledger/balances", summary="Ledger balances per account for the tenant", response_model=Balances)
def balances(request: Request, key: ApiKey = require("jobs:read")) -> JsonResponse:
    values = ledger_rows.balances(context(request).db, key.tenant_id).get(key.tenant_id, {})
    return JsonResponse({"tenantId": key.tenant_id, "balances": values, "totalCents": sum(values.values())})


@router.get("/jobs/{job_id}/ledger/entries", summary="Journal entries of a job", response_model=LedgerEntries,
            responses=problems("JOB_NOT_FOUND"))
def ledger_entries(job_id: str, request: Request, key: ApiKey = require("jobs:read")) -> JsonResponse:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    return JsonResponse({"jobId": job_id, "entries": ledger_rows.entries_for_job(ctx.db, key.tenant_id, job_id)})


@router.get("/jobs/{job_id}/ledger/allocations", summary="Party allocations of a job", response_model=Allocations,
            responses=problems("JOB_NOT_FOUND"))
def ledger_allocations(job_id: str, request: Request, key: ApiKey = require("jobs:read")) -> JsonResponse:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    return JsonResponse({"jobId": job_id,
                         "allocations": ledger_rows.allocations_for_job(ctx.db, key.tenant_id, job_id)})
