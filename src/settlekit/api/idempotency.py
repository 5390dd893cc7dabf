"""`Idempotency-Key` on every API write, through `settlekit.application.idempotency` (the one implementation):
appends reserve the key inside their event transaction (routes/jobs.py), the writes that are not idempotent by
themselves store their answer in their own transaction (`write_in_transaction`), every other write runs `write`
(reserve, act, complete). A write's action returns its status and its typed answer (api/schemas.py), rendered once:
the bytes answered are the bytes stored. A replay returns the stored status and body with
`Idempotent-Replayed: true`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from settlekit.api.auth import ApiKey
from settlekit.api.deps import context, idempotency_key
from settlekit.api.responses import JsonResponse, dumps
from settlekit.application import idempotency as keys
from settlekit.application.database import Database, Tx

request_hash = keys.request_hash


def request_target(request: Request) -> str:
    """The path with its query string: both are part of what a key stands for."""
    query = request.url.query
    return f"{request.url.path}?{query}" if query else request.url.path


Action = Callable[[], tuple[int, BaseModel]]
"""A write: its status and its answer."""


def replayed(status: int, body: Any) -> JsonResponse:
    return JsonResponse(body, status_code=status, headers={"Idempotent-Replayed": "true"})


def _answered(status: int, rendered: bytes) -> Response:
    return Response(rendered, status_code=status, media_type=JsonResponse.media_type)


def _rendering(action: Callable[..., tuple[int, BaseModel]]) -> Callable[..., tuple[int, bytes]]:
    def rendered(*args: Any) -> tuple[int, bytes]:
        status, answer = action(*args)
        return status, dumps(answer)

    return rendered


def run(db: Database, *, tenant_id: str, principal_id: str, method: str, path: str, key: str | None, body: Any,
        action: Action, wait_seconds: float = keys.DEFAULT_WAIT_SECONDS) -> Response:
    """Run `action` at most once per (tenant, principal, "METHOD path", key). `body` must hold every input of
    the request (secrets included: only its hash is stored)."""
    if key is None:
        return _answered(*_rendering(action)())
    status, out, was_replayed = keys.run(db, *_scope(tenant_id, principal_id, method, path, key, body),
                                         _rendering(action), _stored, wait_seconds=wait_seconds)
    return replayed(status, out) if was_replayed else _answered(status, out)


def _scope(tenant_id: str, principal_id: str, method: str, path: str, key: str,
           body: Any) -> tuple[keys.KeyScope, str]:
    """What a key stands for ("METHOD path", the query left out) and the hash of the request it was given with."""
    return (keys.KeyScope(tenant_id, principal_id, f"{method} {path.partition('?')[0]}", key),
            keys.request_hash(method, path, body))


def _stored(rendered: bytes) -> str:
    return rendered.decode("utf-8")


def write_in_transaction(request: Request, key: ApiKey, body: Any,
                         action: Callable[[Tx], tuple[int, BaseModel]]) -> Response:
    """`write` for an action whose writes are one transaction: with an Idempotency-Key, the answer is stored in that
    transaction (an action that is not idempotent by itself, such as skipping a consumer's poison event or
    replaying deliveries, then never runs twice for one key)."""
    ctx = context(request)
    idem = idempotency_key(request)
    if idem is None:
        with ctx.db.transaction() as tx:
            return _answered(*_rendering(action)(tx))
    scope = _scope(key.tenant_id, key.key_id, request.method, request_target(request), idem, body)
    status, out, was_replayed = keys.run_in_transaction(ctx.db, *scope, _rendering(action), _stored,
                                                        wait_seconds=ctx.idempotency_wait)
    return replayed(status, out) if was_replayed else _answered(status, out)


def write(request: Request, key: ApiKey, body: Any, action: Action) -> Response:
    """Run a route's write `action` under the request's `Idempotency-Key` (if any), for the key's tenant."""
    ctx = context(request)
    return run(ctx.db, tenant_id=key.tenant_id, principal_id=key.key_id, method=request.method,
               path=request_target(request), key=idempotency_key(request), body=body, action=action,
               wait_seconds=ctx.idempotency_wait)
