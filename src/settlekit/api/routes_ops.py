"""Operator routes: webhook destinations and deliveries (scope `ops`), signer keys (`admin` to change, `ops` to
read), and deployment-wide consumer verbs (`admin` key of the operator tenant)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from settlekit import dispatch
from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import MAX_INT64, ApiContext, IdPath, context, idempotency_key, require
from settlekit.api.http import JsonResponse
from settlekit.delivery import service as delivery
from settlekit.delivery import store as delivery_store
from settlekit.delivery.secrets import SECRET_ID_RE, db_ref, secret_id_of
from settlekit.errors import NotFoundError, ValidationError

router = APIRouter(prefix="/v1", tags=["ops"])
MAX_GRACE_SECONDS = 30 * 24 * 3600


def _write(request: Request, key: ApiKey, body: Any, action: Any) -> JsonResponse:
    ctx = context(request)
    return idempotency.run(ctx.db, tenant_id=key.tenant_id, principal_id=key.key_id, method=request.method,
                           path=idempotency.request_target(request), key=idempotency_key(request), body=body,
                           action=action, wait_seconds=ctx.idempotency_wait)


# ---------------------------------------------------------------- destinations


SECRET_FIELD = Field(default=None, min_length=1, max_length=4096,
                     description="A whsec_ secret, write-only: stored by the server, never returned.")
SECRET_REF_FIELD = Field(default=None, min_length=1, max_length=4096,
                         description="The id (sec_…) of a secret this tenant stored earlier, as returned in "
                                     "`secretRef`. Paths and other references are refused.")


class DestinationIn(BaseModel):
    """A webhook destination. Give either `secret` (a whsec_ value the server stores for this tenant) or
    `secretRef` (the id of one of this tenant's stored secrets). Secret values are never returned."""

    model_config = ConfigDict(extra="forbid", strict=True)
    destinationId: str = Field(min_length=1, max_length=64)
    url: str = Field(min_length=1, max_length=2048)
    secret: str | None = SECRET_FIELD
    secretRef: str | None = SECRET_REF_FIELD
    signing: Literal["standard", "settld_legacy", "both"] = "standard"
    artifactTypes: list[str] | None = None
    ordering: Literal["best_effort", "strict_scope"] = "best_effort"
    allowPrivateNetwork: bool = False


class DestinationUpdate(BaseModel):
    """Omitted fields are kept. A new `secret`/`secretRef` is a rotation: the old secret keeps signing (two
    signatures per delivery) for `secretGraceSeconds` (default 86400; 0 ends it at once)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    secret: str | None = SECRET_FIELD
    secretRef: str | None = SECRET_REF_FIELD
    secretGraceSeconds: int | None = Field(default=None, ge=0, le=MAX_GRACE_SECONDS)
    signing: Literal["standard", "settld_legacy", "both"] | None = None
    artifactTypes: list[str] | None = None
    ordering: Literal["best_effort", "strict_scope"] | None = None
    allowPrivateNetwork: bool | None = None


class DisableIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field(default="operator", min_length=1, max_length=200)


def _public_ref(ref: str | None) -> str | None:
    """What a tenant may see of a reference: the id of a stored secret, an env name; never a path or value."""
    if ref is None:
        return None
    sid = secret_id_of(ref)
    if sid is not None:
        return sid
    return None if ref.startswith(("inline:", "file:")) else ref


def _destination_json(dest: delivery_store.Destination) -> dict[str, Any]:
    until = dest.previous_secret_expires_at
    rotating = dest.previous_secret_ref is not None and until is not None and until > datetime.now(UTC)
    return {"destinationId": dest.destination_id, "kind": dest.kind, "url": dest.url, "signing": dest.signing,
            "artifactTypes": list(dest.artifact_types) if dest.artifact_types else None,
            "ordering": dest.ordering, "allowPrivateNetwork": dest.allow_private_network, "status": dest.status,
            "disabledReason": dest.disabled_reason, "secretRef": _public_ref(dest.secret_ref),
            "previousSecretRef": _public_ref(dest.previous_secret_ref) if rotating else None,
            "previousSecretExpiresAt": until.astimezone(UTC).isoformat().replace("+00:00", "Z")
            if rotating and until is not None else None}


def _secret_input(secret: str | None, secret_ref: str | None) -> tuple[str | None, str | None]:
    """(secret value, `secret:<id>` reference) from a request, refusing anything but a server-issued id as a
    reference. The refusal never echoes the reference and never looks at the file system."""
    if secret is not None and secret_ref is not None:
        raise ValidationError("give secret or secretRef, not both", code="SCHEMA_INVALID", field="secret")
    if secret_ref is None:
        return secret, None
    if not SECRET_ID_RE.match(secret_ref):
        raise ValidationError("secretRef must be the id of a secret this tenant stored (sec_…); paths and other "
                              "references are not accepted", code="SECRET_REF_FORBIDDEN", field="secretRef")
    return None, db_ref(secret_ref)


@router.post("/destinations", status_code=201, summary="Create a webhook destination")
def create_destination(body: DestinationIn, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)
    value, ref = _secret_input(body.secret, body.secretRef)
    if value is None and ref is None:
        raise ValidationError("secret or secretRef is required", code="SCHEMA_INVALID", field="secret")

    def action() -> tuple[int, Any]:
        dest = delivery.add_destination(
            ctx.db, key.tenant_id, body.destinationId, url=body.url, secret_ref=ref or "", secret_value=value,
            signing=body.signing, artifact_types=body.artifactTypes, ordering=body.ordering,
            allow_private_network=body.allowPrivateNetwork, policy=ctx.destination_policy, actor=key.key_id)
        return 201, _destination_json(dest)

    return _write(request, key, body.model_dump(), action)


@router.get("/destinations", summary="The tenant's destinations")
def list_destinations(request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    found = delivery.list_destinations(context(request).db, key.tenant_id)
    return JsonResponse({"destinations": [_destination_json(d) for d in found]})


@router.get("/destinations/{destination_id}", summary="One destination")
def get_destination(destination_id: str, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    return JsonResponse(_destination_json(delivery.get_destination(context(request).db, key.tenant_id,
                                                                   destination_id)))


@router.patch("/destinations/{destination_id}", summary="Update a destination (omitted fields are kept)")
def update_destination(destination_id: str, body: DestinationUpdate, request: Request,
                       key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)

    value, ref = _secret_input(body.secret, body.secretRef)
    grace = timedelta(seconds=body.secretGraceSeconds) if body.secretGraceSeconds is not None \
        else delivery.DEFAULT_ROTATION_GRACE

    def action() -> tuple[int, Any]:
        current = delivery.get_destination(ctx.db, key.tenant_id, destination_id)
        types = current.artifact_types if body.artifactTypes is None else (tuple(body.artifactTypes) or None)
        updated = delivery_store.Destination(
            tenant_id=key.tenant_id, destination_id=destination_id, url=body.url or current.url,
            secret_ref=ref or current.secret_ref, signing=body.signing or current.signing, artifact_types=types,
            ordering=body.ordering or current.ordering,
            allow_private_network=current.allow_private_network if body.allowPrivateNetwork is None
            else body.allowPrivateNetwork,
            status=current.status, disabled_reason=current.disabled_reason, kind=current.kind)
        saved = delivery.save_destination(ctx.db, updated, policy=ctx.destination_policy, replace=True,
                                          actor=key.key_id, secret_value=value, rotation_grace=grace)
        return 200, _destination_json(saved)

    return _write(request, key, body.model_dump(), action)


@router.post("/destinations/{destination_id}/disable", summary="Disable a destination")
def disable_destination(destination_id: str, request: Request, body: DisableIn | None = None,
                        key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)
    reason = body.reason if body is not None else "operator"

    def action() -> tuple[int, Any]:
        return 200, _destination_json(delivery.disable_destination(ctx.db, key.tenant_id, destination_id,
                                                                   reason=reason, actor=key.key_id))

    return _write(request, key, {"reason": reason}, action)


class EnableIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    backfill: bool = False


@router.post("/destinations/{destination_id}/enable", summary="Re-enable a destination",
             description="The answer's `backfill` reports the artifacts built while the destination was disabled "
                         "that have no delivery to it (`missing`, `since`). With `{\"backfill\": true}` those "
                         "deliveries are created and the delivery its 410 failed is requeued (`created`, "
                         "`requeued`); otherwise `POST /v1/deliveries/requeue` with `since` does it later.")
def enable_destination(destination_id: str, request: Request, body: EnableIn | None = None,
                       key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)
    backfill = body.backfill if body is not None else False

    def action() -> tuple[int, Any]:
        dest, report = delivery.enable_destination_with_backfill(ctx.db, key.tenant_id, destination_id,
                                                                 policy=ctx.destination_policy, actor=key.key_id,
                                                                 backfill=backfill)
        return 200, {**_destination_json(dest), "backfill": report.to_json()}

    return _write(request, key, {"backfill": backfill}, action)


@router.post("/destinations/{destination_id}/requeue", summary="Requeue a destination's failed deliveries")
def requeue_destination(destination_id: str, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)

    def action() -> tuple[int, Any]:
        n = delivery.requeue_destination(ctx.db, key.tenant_id, destination_id, actor=key.key_id)
        return 200, {"destinationId": destination_id, "requeued": n}

    return _write(request, key, None, action)


# ---------------------------------------------------------------- deliveries


@router.get("/deliveries", summary="The tenant's deliveries (filter by state / destination; keyset pages)")
def list_deliveries(request: Request, key: ApiKey = require("ops"),
                    state: Annotated[Literal["pending", "delivered", "failed"] | None, Query()] = None,
                    destinationId: Annotated[str | None, Query(max_length=64)] = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                    afterId: Annotated[int | None, Query(ge=0, le=MAX_INT64)] = None) -> JsonResponse:
    found = delivery.list_deliveries(context(request).db, key.tenant_id, state=state, destination_id=destinationId,
                                     limit=limit, after_id=afterId)
    next_after = found[-1].id if len(found) == limit else None
    return JsonResponse({"deliveries": [d.to_json() for d in found], "nextAfterId": next_after})


@router.get("/deliveries/{delivery_id}", summary="One delivery with its attempt log")
def get_delivery(delivery_id: IdPath, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    detail = delivery.get_delivery(context(request).db, key.tenant_id, delivery_id)
    attempts = [{"attempt": a, "httpStatus": s, "error": e} for a, s, e in detail.attempts]
    return JsonResponse({**detail.delivery.to_json(), "attemptLog": attempts})


class BackfillIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: AwareDatetime
    destinationId: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@router.post("/deliveries/requeue", summary="Backfill the deliveries missing since a time",
             description="For the artifacts built at or after `since`, create the delivery rows missing for "
                         "`destinationId` (or every active destination) and requeue the deliveries that failed "
                         "with `gone` since then. Idempotent: a repeat creates nothing.")
def backfill_deliveries(body: BackfillIn, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)

    def action() -> tuple[int, Any]:
        report = delivery.backfill_deliveries(ctx.db, key.tenant_id, since=body.since,
                                              destination_id=body.destinationId, actor=key.key_id)
        return 200, {"destinationId": body.destinationId, **report.to_json()}

    return _write(request, key, body.model_dump(mode="json"), action)


@router.post("/deliveries/{delivery_id}/requeue", summary="Requeue a failed delivery")
def requeue_delivery(delivery_id: IdPath, request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    ctx = context(request)

    def action() -> tuple[int, Any]:
        delivery.requeue_delivery(ctx.db, key.tenant_id, delivery_id, actor=key.key_id)
        return 200, {"deliveryId": delivery_id, "requeued": 1}

    return _write(request, key, None, action)


# ---------------------------------------------------------------- signer keys


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    publicKeyPem: str = Field(min_length=1, max_length=10_000)
    purpose: Literal["robot", "operator", "server"]
    entityId: str | None = Field(default=None, min_length=1, max_length=200)


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    publicKeyPem: str | None = Field(default=None, min_length=1, max_length=10_000)


def _key_json(k: Any) -> dict[str, Any]:
    return {"keyId": k.key_id, "purpose": k.purpose, "status": k.status, "entityId": k.entity_id,
            "publicKeyPem": k.public_key_pem}


def _find_key(ctx: ApiContext, tenant: str, key_id: str) -> Any:
    for k in ctx.store.list_keys(tenant):
        if k.key_id == key_id:
            return k
    raise NotFoundError(f"signer key {key_id} is not registered", code="SIGNER_KEY_NOT_FOUND", keyId=key_id)


@router.post("/keys", status_code=201, summary="Register a signer public key")
def register_key(body: KeyIn, request: Request, key: ApiKey = require("admin")) -> JsonResponse:
    ctx = context(request)

    def action() -> tuple[int, Any]:
        key_id = ctx.store.register_key(key.tenant_id, body.publicKeyPem, body.purpose, entity_id=body.entityId)
        return 201, _key_json(_find_key(ctx, key.tenant_id, key_id))

    return _write(request, key, body.model_dump(), action)


@router.get("/keys", summary="The tenant's signer keys")
def list_keys(request: Request, key: ApiKey = require("ops")) -> JsonResponse:
    return JsonResponse({"keys": [_key_json(k) for k in context(request).store.list_keys(key.tenant_id)]})


@router.post("/keys/{key_id}/rotate", summary="Mark a key rotated (optionally registering its successor)")
def rotate_key(key_id: str, request: Request, body: RotateIn | None = None,
               key: ApiKey = require("admin")) -> JsonResponse:
    ctx = context(request)
    new_pem = body.publicKeyPem if body is not None else None

    def action() -> tuple[int, Any]:
        old = _find_key(ctx, key.tenant_id, key_id)
        successor = None
        if new_pem is not None:
            successor = ctx.store.register_key(key.tenant_id, new_pem, old.purpose, entity_id=old.entity_id)
        ctx.store.set_key_status(key.tenant_id, key_id, "rotated")
        out = {"rotated": _key_json(_find_key(ctx, key.tenant_id, key_id)),
               "successor": _key_json(_find_key(ctx, key.tenant_id, successor)) if successor else None}
        return 200, out

    return _write(request, key, {"publicKeyPem": new_pem}, action)


@router.post("/keys/{key_id}/revoke", summary="Revoke a signer key")
def revoke_key(key_id: str, request: Request, key: ApiKey = require("admin")) -> JsonResponse:
    ctx = context(request)

    def action() -> tuple[int, Any]:
        ctx.store.set_key_status(key.tenant_id, key_id, "revoked")
        return 200, _key_json(_find_key(ctx, key.tenant_id, key_id))

    return _write(request, key, None, action)


# ---------------------------------------------------------------- consumers (deployment-wide)


class ResetIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    to: Annotated[int, Field(le=MAX_INT64)] | Literal["now"]


Instance = Annotated[str, Query(min_length=1, max_length=200)]


@router.get("/ops/consumers", summary="Consumers with progress and lag")
def list_consumers(request: Request, key: ApiKey = require("admin", operator=True)) -> JsonResponse:
    ctx = context(request)
    found = dispatch.list_consumers(ctx.db, ctx.registered_consumers)
    return JsonResponse({"consumers": [p.to_json() for p in found]})


@router.get("/ops/consumers/{name}", summary="One consumer's state")
def consumer_status(name: str, request: Request, key: ApiKey = require("admin", operator=True),
                    instanceId: Instance = dispatch.SHARED_INSTANCE) -> JsonResponse:
    return JsonResponse(dispatch.require_state(context(request).db, name, instanceId).to_json())


def _verb(request: Request, key: ApiKey, body: Any, action: Any) -> JsonResponse:
    return _write(request, key, body, action)


@router.post("/ops/consumers/{name}/restart", summary="Revive a dead consumer")
def restart_consumer(name: str, request: Request, key: ApiKey = require("admin", operator=True),
                     instanceId: Instance = dispatch.SHARED_INSTANCE) -> JsonResponse:
    db = context(request).db
    return _verb(request, key, {"instanceId": instanceId},
                 lambda: (200, dispatch.restart_consumer(db, name, instanceId).to_json()))


@router.post("/ops/consumers/{name}/disable", summary="Disable a consumer")
def disable_consumer(name: str, request: Request, key: ApiKey = require("admin", operator=True),
                     instanceId: Instance = dispatch.SHARED_INSTANCE) -> JsonResponse:
    db = context(request).db
    return _verb(request, key, {"instanceId": instanceId},
                 lambda: (200, dispatch.disable_consumer(db, name, instanceId).to_json()))


@router.post("/ops/consumers/{name}/enable", summary="Enable a disabled consumer")
def enable_consumer(name: str, request: Request, key: ApiKey = require("admin", operator=True),
                    instanceId: Instance = dispatch.SHARED_INSTANCE) -> JsonResponse:
    db = context(request).db
    return _verb(request, key, {"instanceId": instanceId},
                 lambda: (200, dispatch.enable_consumer(db, name, instanceId).to_json()))


@router.post("/ops/consumers/{name}/skip", summary="Skip the event blocking a consumer (dead-lettered)")
def skip_consumer(name: str, request: Request, key: ApiKey = require("admin", operator=True),
                  instanceId: Instance = dispatch.SHARED_INSTANCE) -> JsonResponse:
    db = context(request).db

    def action() -> tuple[int, Any]:
        result = dispatch.skip_poison(db, name, instanceId)
        return 200, {"consumer": result.state.to_json(), "skippedPosition": result.skipped_position}

    return _verb(request, key, {"instanceId": instanceId}, action)


@router.post("/ops/consumers/{name}/reset", summary="Move a consumer's cursor (0 = replay all, 'now')")
def reset_consumer(name: str, body: ResetIn, request: Request, key: ApiKey = require("admin", operator=True),
                   instanceId: Instance = dispatch.SHARED_INSTANCE) -> JsonResponse:
    db = context(request).db
    return _verb(request, key, {"instanceId": instanceId, "to": body.to},
                 lambda: (200, dispatch.reset_consumer(db, name, body.to, instanceId).to_json()))


@router.get("/ops/consumers/{name}/dead-letters", summary="A consumer's dead letters")
def dead_letters(name: str, request: Request, key: ApiKey = require("admin", operator=True),
                 instanceId: Instance = dispatch.SHARED_INSTANCE) -> JsonResponse:
    db = context(request).db
    dispatch.require_state(db, name, instanceId)
    return JsonResponse({"consumer": name, "instanceId": instanceId,
                         "deadLetters": dispatch.dead_letters(db, name, instanceId)})
