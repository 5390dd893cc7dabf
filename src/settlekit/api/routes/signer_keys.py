"""Signer keys of the tenant (the public keys events are signed with; not API keys): register, list, rotate,
revoke. Changes need `admin`, reading needs `ops`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import ApiContext, TextIdPath, context, require
from settlekit.api.openapi import IDEMPOTENT, problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import Rotated, SignerKey, SignerKeys
from settlekit.errors import NotFoundError
from settlekit.events.signer_keys import KEY_TRANSITIONS, REVOKED, ROTATED

router = APIRouter(prefix="/v1", tags=["ops"], route_class=TypedRoute)


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    publicKeyPem: str = Field(min_length=1, max_length=10_000)
    purpose: Literal["robot", "operator", "server"]
    entityId: str | None = Field(default=None, min_length=1, max_length=200)


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    publicKeyPem: str | None = Field(default=None, min_length=1, max_length=10_000)


def _key(k: Any) -> SignerKey:
    """A registered key (store.signer_keys.SignerKey) as answered."""
    return SignerKey(keyId=k.key_id, purpose=k.purpose, status=k.status, entityId=k.entity_id,
                     publicKeyPem=k.public_key_pem)


def _find_key(ctx: ApiContext, tenant: str, key_id: str) -> SignerKey:
    for k in ctx.appender.signer_keys.of_tenant(tenant):
        if k.key_id == key_id:
            return _key(k)
    raise NotFoundError(f"signer key {key_id} is not registered", code="SIGNER_KEY_NOT_FOUND", keyId=key_id)


@router.post("/keys", status_code=201, summary="Register a signer public key", response_model=SignerKey,
             responses=problems("SIGNER_KEY_INVALID", "SIGNER_KEY_CONFLICT"), openapi_extra=IDEMPOTENT)
def register_key(body: KeyIn, request: Request, key: ApiKey = require("admin")) -> Response:
    ctx = context(request)

    def action() -> tuple[int, SignerKey]:
        key_id = ctx.appender.signer_keys.register(key.tenant_id, body.publicKeyPem, body.purpose,
                                                   entity_id=body.entityId)
        return 201, _find_key(ctx, key.tenant_id, key_id)

    return idempotency.write(request, key, body.model_dump(), action)


@router.get("/keys", summary="The tenant's signer keys")
def list_keys(request: Request, key: ApiKey = require("ops")) -> SignerKeys:
    keys = context(request).appender.signer_keys.of_tenant(key.tenant_id)
    return SignerKeys(keys=[_key(k) for k in keys])


@router.post("/keys/{key_id}/rotate", summary="Mark a key rotated (optionally registering its successor)",
             response_model=Rotated, openapi_extra=IDEMPOTENT,
             responses=problems("SIGNER_KEY_NOT_FOUND", "SIGNER_KEY_INVALID", "SIGNER_KEY_CONFLICT",
                                "SIGNER_KEY_STATUS_CONFLICT"))
def rotate_key(key_id: TextIdPath, request: Request, body: RotateIn | None = None,
               key: ApiKey = require("admin")) -> Response:
    ctx = context(request)
    new_pem = body.publicKeyPem if body is not None else None

    def action() -> tuple[int, Rotated]:
        successor = ctx.appender.signer_keys.change_status(key.tenant_id, key_id, ROTATED,
                                                        allowed_from=KEY_TRANSITIONS[ROTATED], successor_pem=new_pem)
        return 200, Rotated(rotated=_find_key(ctx, key.tenant_id, key_id),
                            successor=_find_key(ctx, key.tenant_id, successor) if successor else None)

    return idempotency.write(request, key, {"publicKeyPem": new_pem}, action)


@router.post("/keys/{key_id}/revoke", summary="Revoke a signer key", response_model=SignerKey,
             responses=problems("SIGNER_KEY_NOT_FOUND"), openapi_extra=IDEMPOTENT)
def revoke_key(key_id: TextIdPath, request: Request, key: ApiKey = require("admin")) -> Response:
    ctx = context(request)

    def action() -> tuple[int, SignerKey]:
        ctx.appender.signer_keys.change_status(key.tenant_id, key_id, REVOKED, allowed_from=KEY_TRANSITIONS[REVOKED])
        return 200, _find_key(ctx, key.tenant_id, key_id)

    return idempotency.write(request, key, None, action)
