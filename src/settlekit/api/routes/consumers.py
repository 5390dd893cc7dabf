"""Dispatcher consumers, deployment-wide (an `admin` key of the operator tenant): progress and lag, restart,
disable, enable, skip the blocking event, reset the cursor, dead letters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from settlekit.api import idempotency, schemas
from settlekit.api.auth import ApiKey
from settlekit.api.deps import TextIdPath, WholeNumber, context, require
from settlekit.api.openapi import IDEMPOTENT, problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import ConsumerProgress, Consumers, DeadLetter, DeadLetters, Skipped
from settlekit.application import consumers as consumer_ops
from settlekit.application.consumers import SHARED_INSTANCE, ConsumerState
from settlekit.application.database import Database, Tx
from settlekit.events.canonical import MAX_SAFE_INTEGER

router = APIRouter(prefix="/v1", tags=["ops"], route_class=TypedRoute)


class ResetIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    # a position as JavaScript holds it (an Idempotency-Key's request hash reads the body so), at most the head
    to: Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER), WholeNumber] | Literal["now"]


Instance = Annotated[str, Query(min_length=1, max_length=200)]
_CONSUMER_CODES = ("OPERATOR_TENANT_REQUIRED", "CONSUMER_NOT_FOUND", "CONSUMER_PROCESSING")


def _state(state: ConsumerState) -> schemas.ConsumerState:
    return schemas.ConsumerState.model_validate(state.to_json())


@router.get("/ops/consumers", summary="Consumers with progress and lag",
            responses=problems("OPERATOR_TENANT_REQUIRED"))
def list_consumers(request: Request, key: ApiKey = require("admin", operator=True)) -> Consumers:
    ctx = context(request)
    found = consumer_ops.list_consumers(ctx.db, ctx.registered_consumers)
    return Consumers(consumers=[ConsumerProgress.model_validate(p.to_json()) for p in found])


@router.get("/ops/consumers/{name}", summary="One consumer's state",
            responses=problems("OPERATOR_TENANT_REQUIRED", "CONSUMER_NOT_FOUND"))
def consumer_status(name: TextIdPath, request: Request, key: ApiKey = require("admin", operator=True),
                    instanceId: Instance = SHARED_INSTANCE) -> schemas.ConsumerState:
    return _state(consumer_ops.require_state(context(request).db, name, instanceId))


def _state_change(verb: str, summary: str, change: Callable[[Database, str, str], ConsumerState],
                  refusals: tuple[str, ...]) -> None:
    """Route `POST /ops/consumers/{name}/<verb>`: `change` the consumer (idempotent by key), answer its state."""

    def endpoint(name: TextIdPath, request: Request, key: ApiKey = require("admin", operator=True),
                 instanceId: Instance = SHARED_INSTANCE) -> Response:
        db = context(request).db
        return idempotency.write(request, key, {"instanceId": instanceId},
                                 lambda: (200, _state(change(db, name, instanceId))))

    router.post(f"/ops/consumers/{{name}}/{verb}", summary=summary, name=f"{verb}_consumer",
                response_model=schemas.ConsumerState, responses=problems(*_CONSUMER_CODES, *refusals),
                openapi_extra=IDEMPOTENT)(endpoint)


_state_change("restart", "Revive a dead consumer", consumer_ops.restart_consumer, ("CONSUMER_NOT_DEAD",))
_state_change("disable", "Disable a consumer", consumer_ops.disable_consumer, ())
_state_change("enable", "Enable a disabled consumer", consumer_ops.enable_consumer, ("CONSUMER_NOT_DISABLED",))


@router.post("/ops/consumers/{name}/skip", summary="Skip the event blocking a consumer (dead-lettered)",
             response_model=Skipped, responses=problems(*_CONSUMER_CODES), openapi_extra=IDEMPOTENT)
def skip_consumer(name: TextIdPath, request: Request, key: ApiKey = require("admin", operator=True),
                  instanceId: Instance = SHARED_INSTANCE) -> Response:
    db = context(request).db

    def action(tx: Tx) -> tuple[int, Skipped]:
        result = consumer_ops.skip_poison(db, name, instanceId, tx=tx)
        return 200, Skipped(consumer=_state(result.state), skippedPosition=result.skipped_position)

    return idempotency.write_in_transaction(request, key, {"instanceId": instanceId}, action)


@router.post("/ops/consumers/{name}/reset", summary="Move a consumer's cursor (0 = replay all, 'now')",
             response_model=schemas.ConsumerState, openapi_extra=IDEMPOTENT,
             responses=problems(*_CONSUMER_CODES, "CONSUMER_RESET_INVALID"))
def reset_consumer(name: TextIdPath, body: ResetIn, request: Request, key: ApiKey = require("admin", operator=True),
                   instanceId: Instance = SHARED_INSTANCE) -> Response:
    db = context(request).db
    return idempotency.write(request, key, {"instanceId": instanceId, "to": body.to},
                             lambda: (200, _state(consumer_ops.reset_consumer(db, name, body.to, instanceId))))


@router.get("/ops/consumers/{name}/dead-letters", summary="A consumer's dead letters",
            responses=problems("OPERATOR_TENANT_REQUIRED", "CONSUMER_NOT_FOUND"))
def dead_letters(name: TextIdPath, request: Request, key: ApiKey = require("admin", operator=True),
                 instanceId: Instance = SHARED_INSTANCE) -> DeadLetters:
    db = context(request).db
    consumer_ops.require_state(db, name, instanceId)
    return DeadLetters(consumer=name, instanceId=instanceId,
                       deadLetters=[DeadLetter.model_validate(d) for d in consumer_ops.dead_letters(db, name,
                                                                                                    instanceId)])
