"""Deliveries of the tenant's artifacts to its destinations (scope `ops`): list, read with the attempt log,
requeue one, backfill the ones missing since a time. A delivery's id is shown as the tenant's opaque token
(settlekit/cursors.py): the row id counts every tenant's deliveries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.convertors import Convertor, register_url_convertor
from starlette.responses import Response

from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import CURSOR_PATTERN, DecimalDigits, Instant, context, require
from settlekit.api.openapi import IDEMPOTENT, problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import (
    Attempt,
    Deliveries,
    DeliveriesBackfilled,
    Delivery,
    DeliveryDetail,
    DeliveryRequeued,
)
from settlekit.application import destinations
from settlekit.application.database import Tx
from settlekit.cursors import DELIVERY, Cursors
from settlekit.errors import NotFoundError, SettlekitError, ValidationError

router = APIRouter(prefix="/v1", tags=["ops"], route_class=TypedRoute)


class _DeliveryIdConvertor(Convertor[str]):
    """A delivery id in a path: a token (settlekit/cursors.py: 16 or more base64url characters) or digits (an old
    numeric id, refused with CURSOR_NUMERIC). /v1/deliveries/requeue is then not a delivery's URL: GET there is 405
    with `Allow: POST`, not a lookup of delivery "requeue"."""

    regex = "[0-9]+|[A-Za-z0-9_-]{16,200}"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("delivery_id", _DeliveryIdConvertor())
DeliveryIdPath = Annotated[str, Path(min_length=1, max_length=200, pattern=CURSOR_PATTERN,
                                     description="a delivery's id as the API returned it")]


def _row_id(cursors: Cursors, tenant_id: str, delivery_id: str) -> int:
    """The row behind a delivery id of the tenant: 404 for any other token (another tenant's, altered), 400
    CURSOR_NUMERIC for a number (a row id, as ids were shown before)."""
    if delivery_id.isascii() and delivery_id.isdigit():
        raise ValidationError("delivery ids are the opaque ids the API returns; numeric ids are no longer accepted",
                              code="CURSOR_NUMERIC", field="deliveryId")
    found = cursors.values(DELIVERY, tenant_id, delivery_id)
    if found is None:
        raise NotFoundError("delivery not found", delivery_id=delivery_id)
    return found[0]


@contextmanager
def _shown_as(delivery_id: str) -> Iterator[None]:
    """A refusal about the delivery names it by the id the tenant gave, never by its row id."""
    try:
        yield
    except SettlekitError as exc:
        if "delivery_id" in exc.details:
            exc.details["delivery_id"] = delivery_id
        raise


def delivery_json(cursors: Cursors, d: Any) -> dict[str, Any]:
    """A delivery row as the tenant sees it: its id as the tenant's token; whether a worker holds it, not which
    one (a worker's id names its host and process)."""
    shown = {**d.to_json(), "id": cursors.encode(DELIVERY, d.tenant_id, d.id)}
    shown["leased"] = shown.pop("lease_owner") is not None
    return shown


@router.get("/deliveries", summary="The tenant's deliveries (filter by state / destination; keyset pages)",
            responses=problems("CURSOR_INVALID", "CURSOR_NUMERIC"))
def list_deliveries(request: Request, key: ApiKey = require("ops"),
                    state: Annotated[Literal["pending", "delivered", "failed"] | None, Query()] = None,
                    destinationId: Annotated[str | None, Query(max_length=64)] = None,
                    limit: Annotated[int, Query(ge=1, le=1000), DecimalDigits] = 100,
                    afterId: Annotated[str | None, Query(min_length=1, max_length=200, pattern=CURSOR_PATTERN,
                                                         description="`nextAfterId` of the previous page")] = None
                    ) -> Deliveries:
    ctx = context(request)
    after = None if afterId is None else ctx.cursors.decode(DELIVERY, key.tenant_id, afterId, field="afterId")[0]
    found = destinations.list_deliveries(ctx.db, key.tenant_id, state=state, destination_id=destinationId,
                                     limit=limit, after_id=after)
    shown = [Delivery.model_validate(delivery_json(ctx.cursors, d)) for d in found]
    next_after = shown[-1].id if len(found) == limit else None
    return Deliveries(deliveries=shown, nextAfterId=next_after)


@router.get("/deliveries/{delivery_id:delivery_id}", summary="One delivery with its attempt log",
            responses=problems("NOT_FOUND", "CURSOR_NUMERIC"))
def get_delivery(delivery_id: DeliveryIdPath, request: Request, key: ApiKey = require("ops")) -> DeliveryDetail:
    ctx = context(request)
    with _shown_as(delivery_id):
        detail = destinations.get_delivery(ctx.db, key.tenant_id, _row_id(ctx.cursors, key.tenant_id, delivery_id))
    attempts = [Attempt(attempt=a, httpStatus=s, error=e) for a, s, e in detail.attempts]
    return DeliveryDetail.model_validate({**delivery_json(ctx.cursors, detail.delivery), "attemptLog": attempts})


class BackfillIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: Instant
    destinationId: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@router.post("/deliveries/requeue", summary="Backfill the deliveries missing since a time",
             response_model=DeliveriesBackfilled, responses=problems("NOT_FOUND", "TENANT_QUOTA_EXCEEDED"),
             openapi_extra=IDEMPOTENT,
             description="For the artifacts built at or after `since`, create the delivery rows missing for "
                         "`destinationId` (or every active destination) and requeue the deliveries that failed "
                         "with `gone` since then. Idempotent: a repeat creates nothing.")
def backfill_deliveries(body: BackfillIn, request: Request, key: ApiKey = require("ops")) -> Response:
    ctx = context(request)

    def action() -> tuple[int, DeliveriesBackfilled]:
        report = destinations.backfill_deliveries(ctx.db, key.tenant_id, since=body.since,
                                              destination_id=body.destinationId, actor=key.key_id)
        return 200, DeliveriesBackfilled.model_validate({"destinationId": body.destinationId, **report.to_json()})

    return idempotency.write(request, key, body.model_dump(mode="json"), action)


@router.post("/deliveries/{delivery_id:delivery_id}/requeue", summary="Requeue a failed delivery",
             response_model=DeliveryRequeued, responses=problems("NOT_FOUND", "CONFLICT", "CURSOR_NUMERIC"),
             openapi_extra=IDEMPOTENT)
def requeue_delivery(delivery_id: DeliveryIdPath, request: Request, key: ApiKey = require("ops")) -> Response:
    ctx = context(request)
    with _shown_as(delivery_id):
        row_id = _row_id(ctx.cursors, key.tenant_id, delivery_id)

    def action(tx: Tx) -> tuple[int, DeliveryRequeued]:
        with _shown_as(delivery_id):
            destinations.requeue_delivery(ctx.db, key.tenant_id, row_id, actor=key.key_id, tx=tx)
        return 200, DeliveryRequeued(deliveryId=delivery_id, requeued=1)

    return idempotency.write_in_transaction(request, key, None, action)
