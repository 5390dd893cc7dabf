"""Health: liveness and readiness (open, no key) and the Prometheus metrics (an `ops` key of the operator
tenant)."""

from __future__ import annotations

import logging
import os

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import PlainTextResponse, Response

from settlekit.api.auth import ApiKey
from settlekit.api.deps import context, require
from settlekit.api.openapi import problems
from settlekit.api.problems import problem_response
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import Health, Ready

router = APIRouter(tags=["health"], route_class=TypedRoute)
READY_TIMEOUT_SECONDS = 0.5  # /readyz answers within this, reachable or not
_EXPOSITION = {"description": "The Prometheus text exposition format (`text/plain; version=…; charset=utf-8`).",
               "content": {"text/plain": {"schema": {"type": "string"}}}}


@router.get("/healthz", summary="Liveness")
def healthz() -> Health:
    """`pid`: the answering API process (`serve --workers N` runs several on one port)."""
    return Health(status="ok", pid=os.getpid())


@router.get("/readyz", summary="Readiness: database reachable and migrations current", response_model=Ready,
            responses=problems("DATABASE_UNAVAILABLE", "MIGRATIONS_PENDING"))
async def readyz(request: Request) -> Ready | Response:
    ctx = context(request)
    try:
        with anyio.fail_after(READY_TIMEOUT_SECONDS):
            pending = await anyio.to_thread.run_sync(ctx.db.pending_migrations, limiter=ctx.ready_threads,
                                                     abandon_on_cancel=True)
    except Exception as exc:  # any driver error or the deadline means not ready; the detail goes to the log
        logging.getLogger("settlekit.api").warning("readiness check failed: %s", exc,
                                                   exc_info=not isinstance(exc, TimeoutError))
        return problem_response(503, "DATABASE_UNAVAILABLE", "the database is not reachable", retryAfterSeconds=1)
    if pending:
        return problem_response(503, "MIGRATIONS_PENDING", "database migrations are pending",
                                pendingMigrations=pending)
    return Ready(status="ready")


@router.get("/metrics", summary="Prometheus metrics (deployment-wide: an `ops` key of the operator tenant)",
            response_class=PlainTextResponse, responses={200: _EXPOSITION, **problems("OPERATOR_TENANT_REQUIRED")})
def metrics(request: Request, key: ApiKey = require("ops", operator=True)) -> Response:
    ctx = context(request)
    exposed = ctx.exposed_registry if ctx.exposed_registry is not None else ctx.registry
    return Response(generate_latest(exposed), media_type=CONTENT_TYPE_LATEST)
