"""Recovery and endpoint tools of a destination (scope `ops`), as Svix offers them: replay its deliveries over a
time window (a recorded job the delivery worker carries out at a bounded rate), send it a test message (a few at a
time per tenant, each within its deadline), its endpoint statistics. (Automatic disabling after a long failure
streak is the delivery worker's; its reason shows in the destination's `disabledReason`, and enabling clears it.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import DestinationIdPath, Instant, context, require
from settlekit.api.openapi import IDEMPOTENT, problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import Circuit
from settlekit.application import destinations
from settlekit.application.database import Tx
from settlekit.application.destinations import replays
from settlekit.cursors import DELIVERY

router = APIRouter(prefix="/v1", tags=["ops"], route_class=TypedRoute)

_PROBLEMS = problems("DELIVERY_WINDOW_INVALID", "NOT_FOUND")
ReplayIdPath = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^rpl_[0-9a-f]{32}$")]


class ReplayIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: Instant = Field(description="deliveries created at or after this time")
    until: Instant | None = Field(default=None, description="and before this time (default: now)")


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReplayOut(_Answer):
    replayId: str
    destinationId: str
    since: str
    until: str
    status: str = Field(description="running, done or canceled")
    total: int = Field(description="delivered or failed deliveries of the window when the replay was created")
    replayed: int = Field(description="deliveries sent again so far (new attempts, same webhook-id)")
    skipped: int = Field(description="deliveries the replay found pending (left as they are)")
    createdAt: str
    updatedAt: str
    finishedAt: str | None


class ReplayCreated(ReplayOut):
    alreadyPending: int = Field(description="deliveries of the window pending when the replay was created")


class Replays(_Answer):
    replays: list[ReplayOut] = Field(description="the destination's latest replays, newest first")


class TestSendOut(_Answer):
    destinationId: str
    webhookId: str = Field(description="the test message's webhook-id (msg_test_…)")
    ok: bool = Field(description="answered with a 2xx")
    httpStatus: int | None
    error: str | None = Field(description="why no status came back: timeout, network_error, ssrf_blocked, …")
    errorMessage: str | None
    durationMs: float
    responseSnippet: str | None


class AttemptCounts(_Answer):
    total: int
    succeeded: int
    failed: int
    truncated: bool = Field(description="the window held more attempts than one read counts (the newest count)")


class Latency(_Answer):
    p50: float | None
    p90: float | None
    p99: float | None


class LastError(_Answer):
    at: str | None
    httpStatus: int | None
    error: str | None
    deliveryId: str = Field(description="the delivery's id: an opaque token of the tenant")


class DeliveryCounts(_Answer):
    pending: int
    delivered: int
    failed: int
    truncated: bool = Field(description="the window held more deliveries than one count reads (10,000): the "
                                        "counts are those of the newest 10,000")
    countedSince: str | None = Field(description="the creation time of the oldest delivery counted when "
                                                 "truncated, else the window's start")


class StatsOut(_Answer):
    destinationId: str
    since: str
    until: str
    status: str
    disabledReason: str | None = Field(description="why it is disabled (`failing: …` when automatically)")
    attempts: AttemptCounts
    successRate: float | None = Field(description="succeeded / total attempts of the window (None: none)")
    latencyMs: Latency
    lastError: LastError | None
    deliveries: DeliveryCounts = Field(description="deliveries created in the window, per state (at most the "
                                               "newest 10,000 of them: see `truncated`)")
    consecutiveFailures: int = Field(description="failed attempts in a row now")
    failingSince: str | None
    circuit: Circuit


@router.post("/destinations/{destination_id}/replay", status_code=202,
             summary="Send a destination's deliveries of a window again (a replay job)",
             description="Records a replay: every delivered or failed delivery of the destination created in "
                         "[since, until) goes back to pending, due now: new attempts (the attempt log numbers on), "
                         "the same webhook-id. The first ones at once, the rest at `replay_rate` per second; "
                         "deliveries pending by then are left as they are. At most one replay runs per "
                         "destination (409 REPLAY_RUNNING); a window holds at most `replay_max_deliveries` (422 "
                         "REPLAY_TOO_LARGE) and spans at most `replay_max_window_hours`. Progress: the replay's "
                         "URL (Location). Idempotent by Idempotency-Key.",
             response_model=ReplayCreated,
             responses=problems("DELIVERY_WINDOW_INVALID", "NOT_FOUND", "REPLAY_RUNNING", "REPLAY_TOO_LARGE"),
             openapi_extra=IDEMPOTENT)
def replay_destination(destination_id: DestinationIdPath, body: ReplayIn, request: Request,
                       key: ApiKey = require("ops")) -> Response:
    ctx = context(request)

    def action(tx: Tx) -> tuple[int, ReplayCreated]:
        now = datetime.now(UTC)
        since, until = destinations.window(body.since, body.until, now)
        row, pending = replays.create(tx, key.tenant_id, destination_id, since=since, until=until,
                                      policy=ctx.replay_policy, actor=key.key_id, now=now)
        return 202, ReplayCreated.model_validate({**replays.to_json(row), "alreadyPending": pending})

    response = idempotency.write_in_transaction(request, key, body.model_dump(mode="json"), action)
    if response.status_code == 202:
        replay_id = json.loads(bytes(response.body))["replayId"]
        response.headers["Location"] = f"/v1/destinations/{destination_id}/replays/{replay_id}"
    return response


@router.get("/destinations/{destination_id}/replays", summary="A destination's replays",
            responses=problems("NOT_FOUND"))
def list_replays(destination_id: DestinationIdPath, request: Request, key: ApiKey = require("ops")) -> Replays:
    rows = replays.list_for(context(request).db, key.tenant_id, destination_id)
    return Replays(replays=[ReplayOut.model_validate(replays.to_json(r)) for r in rows])


@router.get("/destinations/{destination_id}/replays/{replay_id}", summary="One replay and its progress",
            responses=problems("NOT_FOUND"))
def get_replay(destination_id: DestinationIdPath, replay_id: ReplayIdPath, request: Request,
               key: ApiKey = require("ops")) -> ReplayOut:
    row = replays.get(context(request).db, key.tenant_id, destination_id, replay_id)
    return ReplayOut.model_validate(replays.to_json(row))


@router.post("/destinations/{destination_id}/replays/{replay_id}/cancel", summary="Cancel a running replay",
             description="What the replay has requeued stays queued; the rest of its window is not sent again.",
             response_model=ReplayOut, responses=problems("NOT_FOUND", "REPLAY_NOT_RUNNING"),
             openapi_extra=IDEMPOTENT)
def cancel_replay(destination_id: DestinationIdPath, replay_id: ReplayIdPath, request: Request,
                  key: ApiKey = require("ops")) -> Response:
    def action(tx: Tx) -> tuple[int, ReplayOut]:
        row = replays.cancel(tx, key.tenant_id, destination_id, replay_id, actor=key.key_id, now=datetime.now(UTC))
        return 200, ReplayOut.model_validate(replays.to_json(row))

    return idempotency.write_in_transaction(request, key, None, action)


@router.post("/destinations/{destination_id}/test", summary="Send a destination a signed test message now",
             description="One POST of `{\"type\": \"settlekit.test\", …}`, signed as the destination's deliveries "
                         "are, through the SSRF guard, sent whether the destination is active or disabled; the "
                         "answer says how it went, within `test_send_timeout`. Nothing is queued or stored; a "
                         "repeat sends another. A tenant has at most `test_send_concurrency` test sends in flight "
                         "per API process (429 TEST_SEND_BUSY beyond).",
             responses=problems(
                 "NOT_FOUND", "TEST_SEND_BUSY", "SECRET_NOT_FOUND", "SECRET_REF_INVALID", "SECRET_PROVIDER_FORBIDDEN",
                 "SECRET_FILE_REFUSED"))
async def test_destination(destination_id: DestinationIdPath, request: Request,
                           key: ApiKey = require("ops")) -> TestSendOut:
    ctx = context(request)
    timeout = ctx.test_sends.timeout
    with ctx.test_sends.slot(key.tenant_id):
        sent = await destinations.send_test(ctx.db, key.tenant_id, destination_id, policy=ctx.destination_policy,
                                        sender=destinations.config_for_test_send(timeout))
    return TestSendOut.model_validate(sent.to_json())


@router.get("/destinations/{destination_id}/stats", summary="A destination's endpoint statistics",
            description="Over [since, until) (default: the last 24 hours): attempts, success rate, latency "
                        "percentiles, the last error, deliveries per state, and the current failure streak.",
            responses=_PROBLEMS)
def destination_stats(destination_id: DestinationIdPath, request: Request, key: ApiKey = require("ops"),
                      since: Annotated[Instant | None, Query()] = None,
                      until: Annotated[Instant | None, Query()] = None) -> StatsOut:
    ctx = context(request)
    stats = destinations.destination_stats(ctx.db, key.tenant_id, destination_id, since=since, until=until)
    last_error = stats["lastError"]
    if last_error is not None:  # a delivery row id is deployment-wide: the tenant sees its token
        stats["lastError"] = {**last_error,
                              "deliveryId": ctx.cursors.encode(DELIVERY, key.tenant_id, last_error["deliveryId"])}
    return StatsOut.model_validate(stats)
