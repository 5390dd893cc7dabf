"""The tenant's ledger: balances per account (now, as of an instant or a position, per party), an account's
postings page by page, and a job's journal entries and party allocations. Event positions and page cursors are the
tenant's opaque tokens (settlekit/cursors.py), never global positions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from settlekit.api.auth import ApiKey
from settlekit.api.deps import (
    CURSOR_PATTERN,
    MAX_INT64,
    PageLimit,
    TextIdPath,
    context,
    is_rfc3339,
    job_head,
    require,
)
from settlekit.api.openapi import problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import Allocation, Allocations, LedgerEntries, LedgerEntry
from settlekit.application import ledger as ledger_rows
from settlekit.application import ledger as timeline
from settlekit.cursors import POSTINGS
from settlekit.errors import NotFoundError, ValidationError
from settlekit.ledger.timeline import millis_to_iso, parse_instant

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=TypedRoute)


class LedgerBalances(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenantId: str
    asOf: str | None = Field(None, description="the instant asked for (UTC), when one was")
    position: str | None = Field(None, description="the position cursor asked for, when one was",
                                 pattern=CURSOR_PATTERN)
    partyId: str | None = Field(None, description="the party whose allocations are summed, when one was")
    balances: dict[str, int] = Field(description="cents per account id, accounts sorted")
    totalCents: int


class AccountPosting(BaseModel):
    model_config = ConfigDict(extra="forbid")
    position: str = Field(description="the position cursor of the event that posted the entry (as the event feed "
                                      "shows it)", pattern=CURSOR_PATTERN)
    entryId: str
    postingId: str
    at: str
    amountCents: int = Field(description="positive: debit; negative: credit")
    jobId: str
    eventId: str
    eventType: str
    memo: str | None


class AccountPostings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    accountId: str
    partyId: str | None
    postings: list[AccountPosting]
    nextCursor: str | None


@router.get("/ledger/balances", summary="Ledger balances per account: now, as of an instant or position, per party",
            responses=problems("LEDGER_AS_OF_INVALID", "CURSOR_INVALID", "CURSOR_NUMERIC"))
def balances(request: Request, key: ApiKey = require("jobs:read"),
             as_of: Annotated[str | None, Query(alias="asOf", max_length=64, json_schema_extra={
                 "format": "date-time", "description": "an RFC 3339 date-time whose UTC instant lies in years 1 to "
                                                       "9999; not with `position`"})] = None,
             position_cursor: Annotated[str | None, Query(
                 alias="position", min_length=1, max_length=200, pattern=CURSOR_PATTERN,
                 description="a position cursor (an event's `position` in the event feed or an append's answer): "
                             "the entries of events at or before it")] = None,
             party: Annotated[str | None, Query(min_length=1, max_length=200)] = None) -> LedgerBalances:
    ctx = context(request)
    db = ctx.db
    if as_of is not None and position_cursor is not None:
        raise ValidationError("give asOf or position, not both", code="LEDGER_AS_OF_INVALID", field="asOf")
    position = (None if position_cursor is None
                else ctx.cursors.position(key.tenant_id, position_cursor, field="position"))
    instant = None
    if as_of is not None:
        millis = parse_instant(as_of) if is_rfc3339(as_of) else None
        if millis is None:
            raise ValidationError("asOf must be an RFC 3339 date-time with an offset, e.g. 2026-01-31T23:59:59Z",
                                  code="LEDGER_AS_OF_INVALID", field="asOf")
        instant = millis_to_iso(millis)
        values = timeline.balances_as_of(db, key.tenant_id, "t", millis, party_id=party or timeline.ACCOUNT)
    elif position is not None or party is not None:
        values = timeline.balances_as_of(db, key.tenant_id, "p", MAX_INT64 if position is None else position,
                                         party_id=party or timeline.ACCOUNT)
    else:
        values = ledger_rows.balances(db, key.tenant_id).get(key.tenant_id, {})
    return LedgerBalances(tenantId=key.tenant_id, asOf=instant, position=position_cursor, partyId=party,
                          balances=values, totalCents=sum(values.values()))


@router.get("/ledger/accounts/{account_id}/postings", summary="An account's postings in ledger order (keyset pages)",
            responses=problems("CURSOR_INVALID", "LEDGER_ACCOUNT_NOT_FOUND"))
def account_postings(account_id: TextIdPath, request: Request, key: ApiKey = require("jobs:read"),
                     party: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
                     limit: PageLimit = 50,
                     cursor: Annotated[str | None, Query(max_length=800)] = None) -> AccountPostings:
    ctx = context(request)
    db, tenant, party_id = ctx.db, key.tenant_id, party or timeline.ACCOUNT
    if not timeline.account_known(db, tenant, account_id):
        raise NotFoundError(f"no ledger account {account_id!r}", code="LEDGER_ACCOUNT_NOT_FOUND",
                            accountId=account_id)
    listing = (account_id, party_id)
    after = None
    if cursor:
        found = ctx.cursors.values(POSTINGS, tenant, cursor, count=3, listing=listing)
        if found is None:
            raise ValidationError("invalid cursor", code="CURSOR_INVALID", field="cursor")
        after = (found[0], found[1], found[2])
    page = timeline.account_postings(db, tenant, account_id, after=after, limit=limit, party_id=party_id)
    tokens = ctx.cursors.encode_all("event", tenant, [p["position"] for p in page.postings])
    postings = [AccountPosting.model_validate({**p, "position": t}) for p, t in zip(page.postings, tokens, strict=True)]
    next_cursor = (ctx.cursors.encode(POSTINGS, tenant, *page.last_key, listing=listing)
                   if page.more and page.last_key else None)
    return AccountPostings(accountId=account_id, partyId=party, postings=postings, nextCursor=next_cursor)


@router.get("/jobs/{job_id}/ledger/entries", summary="Journal entries of a job", responses=problems("JOB_NOT_FOUND"))
def ledger_entries(job_id: TextIdPath, request: Request, key: ApiKey = require("jobs:read")) -> LedgerEntries:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    entries = ledger_rows.entries_for_job(ctx.db, key.tenant_id, job_id)
    return LedgerEntries(jobId=job_id, entries=[LedgerEntry.model_validate(e) for e in entries])


@router.get("/jobs/{job_id}/ledger/allocations", summary="Party allocations of a job",
            responses=problems("JOB_NOT_FOUND"))
def ledger_allocations(job_id: TextIdPath, request: Request, key: ApiKey = require("jobs:read")) -> Allocations:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    allocations = ledger_rows.allocations_for_job(ctx.db, key.tenant_id, job_id)
    return Allocations(jobId=job_id, allocations=[Allocation.model_validate(a) for a in allocations])
