"""The API's routes, one module per resource, each with its own APIRouter. `ROUTERS` is the order `create_app`
includes them in (the order of the OpenAPI document)."""

from __future__ import annotations

from fastapi import APIRouter

from settlekit.api.routes import (
    artifacts,
    consumers,
    contracts,
    deliveries,
    destination_tools,
    destinations,
    events,
    finance,
    health,
    jobs,
    ledger,
    signer_keys,
)

ROUTERS: tuple[APIRouter, ...] = (
    jobs.router,
    events.router,
    ledger.router,
    finance.router,
    artifacts.router,
    destinations.router,
    destination_tools.router,
    deliveries.router,
    signer_keys.router,
    contracts.router,
    consumers.router,
    health.router,
)
