"""Deliveries of the tenant's artifacts to its destinations (scope `ops`): list, read with the attempt log,
requeue one, backfill the ones missing since a time."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import DecimalDigits, IdPath, OptionalPositionQuery, context, require
from settlekit.api.openapi import IDEMPOTENT, problems
from settlekit.api.responses import JsonResponse
from settlekit.api.schemas import Deliveries, DeliveriesBackfilled, DeliveryDetail, DeliveryRequeued
from settlekit.application.database import Tx
from settlekit.delivery import service as delivery

router = APIRouter(prefix="/v1", tags=["ops"])


@router.get("/deliveries", summary="The tenant's deliveries (filter by state / destination; keyset pages)",
            response_model=Deliveries)
def list_deliveries(request: Request, key: ApiKey = require("ops"),
                    state: Annotated[Literal["pending", "delivered", "failed"] | None, Query()] = None,
                    destinationId: Annotated[str | None, Query(max_length=64)] = None,
                    limit: Annotated[int, DecimalDigits, Query(ge=1, le=1000)] = 100,
                    afterId: OptionalPositionQuery = None) -> JsonResponse:
    found = delivery.list_deliveries(context(request).db, key.tenant_id, state=state, destination_id=destinationId,
                                     limit=limit, after_id=afterId)
    next_after = found[-1].id if len(found) == limit else None
    return JsonResponse({"deliveries": [d.to_json() for d in found], "nextAfterId": next_after})


@router.get("/deliveries/{delivery_id}", summary="One delivery with its attempt log", response_model=DeliveryDetail,
            responses=problems("NOT_FOUND"))
def get_delivery(delivery_id: IdPath, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    detail = delivery.get_delivery(context(request).db, key.tenant_id, delivery_id)
    attempts = [{"attempt": a, "httpStatus": s, "error": e} for a, s, e in detail.attempts]
    return JsonResponse({**detail.delivery.to_json(), "attemptLog": attempts})


class BackfillIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: AwareDatetime
    destinationId: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@router.post("/deliveries/requeue", summary="Backfill the deliveries missing since a time",
             response_model=DeliveriesBackfilled, responses=problems("NOT_FOUND", "TENANT_QUOTA_EXCEEDED"),
             openapi_extra=IDEMPOTENT,
             description="For the artifacts built at or after `since`, create the delivery rows missing for "
                         "`destinationId` (or every active destination) and requeue the deliveries that failed "
                         "with `gone` since then. Idempotent: a repeat creates nothing.")
def backfill_deliveries(body: BackfillIn, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)

    def action() -> tuple[int, Any]:
        report = delivery.backfill_deliveries(ctx.db, key.tenant_id, since=body.since,
                                              destination_id=body.destinationId, actor=key.key_id)
        return 200, {"destinationId": body.destinationId, **report.to_json()}

    return idempotency.write(request, key, body.model_dump(mode="json"), action)


@router.post("/deliveries/{delivery_id}/requeue", summary="Requeue a failed delivery", response_model=DeliveryRequeued,
             responses=problems("NOT_FOUND", "CONFLICT"), openapi_extra=IDEMPOTENT)
def requeue_delivery(delivery_id: IdPath, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)

    def action(tx: Tx) -> tuple[int, Any]:
        delivery.requeue_delivery(ctx.db, key.tenant_id, delivery_id, actor=key.key_id, tx=tx)
        return 200, {"deliveryId": delivery_id, "requeued": 1}

    return idempotency.write_in_transaction(request, key, None, action)
