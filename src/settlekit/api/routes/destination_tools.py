"""Recovery and endpoint tools of a destination (scope `ops`), as Svix offers them: replay its deliveries over a
time window, send it a test message, its endpoint statistics. (Automatic disabling after a long failure streak
is the delivery worker's; its reason shows in the destination's `disabledReason`, and enabling clears it.)"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import DestinationIdPath, context, require
from settlekit.api.openapi import IDEMPOTENT, problems
from settlekit.api.responses import JsonResponse
from settlekit.delivery import recovery
from settlekit.delivery.sender import SenderConfig
from settlekit.store.db import Tx

router = APIRouter(prefix="/v1", tags=["ops"])
TEST_TIMEOUT = 10.0  # seconds a test send may take


_PROBLEMS = problems("DELIVERY_WINDOW_INVALID", "NOT_FOUND")


class ReplayIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: AwareDatetime = Field(description="deliveries created at or after this time")
    until: AwareDatetime | None = Field(default=None, description="and before this time (default: now)")


class ReplayOut(BaseModel):
    destinationId: str
    since: str
    until: str
    replayed: int = Field(description="delivered or failed deliveries sent again (new attempts, same webhook-id)")
    alreadyPending: int = Field(description="deliveries of the window still pending, left as they are")


class TestSendOut(BaseModel):
    destinationId: str
    webhookId: str = Field(description="the test message's webhook-id (msg_test_…)")
    ok: bool = Field(description="answered with a 2xx")
    httpStatus: int | None
    error: str | None = Field(description="why no status came back: timeout, network_error, ssrf_blocked, …")
    errorMessage: str | None
    durationMs: float
    responseSnippet: str | None


class AttemptCounts(BaseModel):
    total: int
    succeeded: int
    failed: int
    truncated: bool = Field(description="the window held more attempts than one read counts (the newest count)")


class Latency(BaseModel):
    p50: float | None
    p90: float | None
    p99: float | None


class LastError(BaseModel):
    at: str | None
    httpStatus: int | None
    error: str | None
    deliveryId: int


class DeliveryCounts(BaseModel):
    pending: int
    delivered: int
    failed: int


class StatsOut(BaseModel):
    destinationId: str
    since: str
    until: str
    status: str
    disabledReason: str | None = Field(description="why it is disabled (`failing: …` when automatically)")
    attempts: AttemptCounts
    successRate: float | None = Field(description="succeeded / total attempts of the window (None: none)")
    latencyMs: Latency
    lastError: LastError | None
    deliveries: DeliveryCounts = Field(description="deliveries created in the window, per state")
    consecutiveFailures: int = Field(description="failed attempts in a row now")
    failingSince: str | None


@router.post("/destinations/{destination_id}/replay", summary="Send a destination's deliveries of a window again",
             description="Every delivered or failed delivery of the destination created in [since, until) goes "
                         "back to pending, due now: new attempts (the attempt log numbers on), the same "
                         "webhook-id. Pending ones are left as they are. Idempotent by Idempotency-Key.",
             response_model=ReplayOut, responses=_PROBLEMS, openapi_extra=IDEMPOTENT)
def replay_destination(destination_id: DestinationIdPath, body: ReplayIn, request: Request,
                       key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)

    def action(tx: Tx) -> tuple[int, Any]:
        report = recovery.replay_destination(ctx.db, key.tenant_id, destination_id, since=body.since,
                                             until=body.until, actor=key.key_id, tx=tx)
        return 200, report.to_json()

    return idempotency.write_in_transaction(request, key, body.model_dump(mode="json"), action)


@router.post("/destinations/{destination_id}/test", summary="Send a destination a signed test message now",
             description="One POST of `{\"type\": \"settlekit.test\", …}`, signed as the destination's deliveries "
                         "are, through the SSRF guard, sent whether the destination is active or disabled; the "
                         "answer says how it went. Nothing is queued or stored; a repeat sends another.",
             response_model=TestSendOut, responses=_PROBLEMS)
async def test_destination(destination_id: DestinationIdPath, request: Request,
                           key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)
    sent = await recovery.send_test(ctx.db, key.tenant_id, destination_id, policy=ctx.destination_policy,
                                    sender=SenderConfig(timeout=TEST_TIMEOUT, connect_timeout=5.0))
    return JsonResponse(sent.to_json())


@router.get("/destinations/{destination_id}/stats", summary="A destination's endpoint statistics",
            description="Over [since, until) (default: the last 24 hours): attempts, success rate, latency "
                        "percentiles, the last error, deliveries per state, and the current failure streak.",
            response_model=StatsOut, responses=_PROBLEMS)
def destination_stats(destination_id: DestinationIdPath, request: Request, key: ApiKey = require("ops"),
                      since: Annotated[AwareDatetime | None, Query()] = None,
                      until: Annotated[AwareDatetime | None, Query()] = None) -> JsonResponse:
    return JsonResponse(recovery.destination_stats(context(request).db, key.tenant_id, destination_id,
                                                   since=since, until=until))
