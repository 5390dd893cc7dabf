"""Webhook destinations of the tenant (scope `ops`): create, list, read, update (a new secret is a rotation with
a grace period), disable, enable (with an optional backfill), requeue their failed deliveries."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from settlekit.api import idempotency
from settlekit.api.auth import ApiKey
from settlekit.api.deps import DestinationIdPath, WholeNumber, context, require
from settlekit.api.openapi import IDEMPOTENT, PY_SPACE, problems
from settlekit.api.responses import TypedRoute
from settlekit.api.schemas import Circuit, Destination, DestinationRequeued, Destinations, EnabledDestination
from settlekit.application import destinations
from settlekit.application.database import Tx
from settlekit.errors import ValidationError

router = APIRouter(prefix="/v1", tags=["ops"], route_class=TypedRoute)
MAX_GRACE_SECONDS = 30 * 24 * 3600
# what creating or changing a destination checks: the URL (SSRF guard) and the secret or its reference
_CHECKS = ("DESTINATION_URL_FORBIDDEN", "WEBHOOK_SECRET_INVALID", "SECRET_REF_FORBIDDEN", "SECRET_REF_INVALID",
           "SECRET_NOT_FOUND", "SECRET_PROVIDER_FORBIDDEN", "DESTINATION_CHECKS_BUSY")


SECRET_FIELD = Field(default=None, min_length=1, max_length=4096,
                     description="A whsec_ secret, write-only: stored by the server, never returned.")
SECRET_REF_FIELD = Field(default=None, min_length=1, max_length=4096,
                         description="The id (sec_…) of a secret this tenant stored earlier, as returned in "
                                     "`secretRef`. Paths and other references are refused.")
# What the document states of a destination's input beyond types and lengths; the routes check it themselves, with
# their own codes (application.destinations, delivery.ssrf): an id of [A-Za-z0-9._-] starting with a letter or digit, an
# http(s) URL (whose host the SSRF guard judges), a secret of one line that is a whsec_ value unless only
# settld_legacy signs with it, a secretRef that is a stored secret's id, and secret and secretRef not both.
DESTINATION_ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
URL_PATTERN = "^[Hh][Tt][Tt][Pp][Ss]?://[^\\u0000]*$"
# one line as Python's splitlines reads it, no white space around it (destinations.check_secret_value)
_SECRET_LINE = (f"^[^\\u0000{PY_SPACE}]([^\\u0000\\n\\r\\v\\f\\u001c-\\u001e\\u0085\\u2028\\u2029]*"
                f"[^\\u0000{PY_SPACE}])?$")
_WHSEC = "^whsec_([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}={0,2}|[A-Za-z0-9+/]{3}=?)$"
_SECRET_ID = "^sec_[0-9a-f]{32}$"


def _given(name: str) -> dict[str, Any]:
    return {"required": [name], "properties": {name: {"type": "string"}}}


def _secret_rules(schema: dict[str, Any], *, required: bool) -> None:
    """The document's rules for `secret` and `secretRef` (`required`: one of them must be given)."""
    members = schema["properties"]
    members["secret"]["anyOf"][0]["pattern"] = _SECRET_LINE
    members["secretRef"]["anyOf"][0]["pattern"] = _SECRET_ID
    legacy_only = {"required": ["signing"], "properties": {"signing": {"const": "settld_legacy"}}}
    standard_secret = {"properties": {"secret": {"anyOf": [{"type": "string", "pattern": _WHSEC},
                                                           {"type": "null"}]}}}
    # on a PATCH without `signing` the destination's own signing applies: the document cannot say which
    rules: list[dict[str, Any]] = [
        {"not": {"allOf": [_given("secret"), _given("secretRef")]}},
        {"anyOf": [legacy_only, standard_secret] if required else
         [legacy_only, standard_secret, {"not": _given("signing")}]},
    ]
    if required:
        rules.append({"anyOf": [_given("secret"), _given("secretRef")]})
    schema["allOf"] = rules


ArtifactTypeName = Annotated[str, Field(min_length=1, max_length=destinations.MAX_ARTIFACT_TYPE_LENGTH)]
ArtifactTypes = Annotated[list[ArtifactTypeName] | None,
                          Field(min_length=1, max_length=destinations.MAX_ARTIFACT_TYPES)]


class DestinationIn(BaseModel):
    """A webhook destination. Give either `secret` (a whsec_ value the server stores for this tenant) or
    `secretRef` (the id of one of this tenant's stored secrets). Secret values are never returned."""

    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra=lambda schema: _secret_rules(schema, required=True))
    destinationId: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": DESTINATION_ID_PATTERN})
    url: str = Field(min_length=1, max_length=2048, json_schema_extra={"pattern": URL_PATTERN})
    secret: str | None = SECRET_FIELD
    secretRef: str | None = SECRET_REF_FIELD
    signing: Literal["standard", "settld_legacy", "both"] = "standard"
    artifactTypes: ArtifactTypes = Field(default=None, description="The artifact types delivered to it (e.g. "
                                         "`SettlementStatement.v1`); omitted or null: every type")
    ordering: Literal["best_effort", "strict_scope"] = "best_effort"
    allowPrivateNetwork: bool = False


class DestinationUpdate(BaseModel):
    """Omitted fields are kept (`artifactTypes: null` means every type). A new `secret`/`secretRef` is a rotation:
    the old secret keeps signing (two signatures per delivery) for `secretGraceSeconds` (default 86400; 0 ends it
    at once)."""

    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra=lambda schema: _secret_rules(schema, required=False))
    url: Annotated[str, Field(min_length=1, max_length=2048, json_schema_extra={"pattern": URL_PATTERN})] | None = None
    secret: str | None = SECRET_FIELD
    secretRef: str | None = SECRET_REF_FIELD
    secretGraceSeconds: Annotated[int, Field(ge=0, le=MAX_GRACE_SECONDS), WholeNumber] | None = None
    signing: Literal["standard", "settld_legacy", "both"] | None = None
    artifactTypes: ArtifactTypes = Field(default=None, description="The artifact types delivered to it; omitted: "
                                         "kept; null: every type")
    ordering: Literal["best_effort", "strict_scope"] | None = None
    allowPrivateNetwork: bool | None = None


class DisableIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field(default="operator", min_length=1, max_length=200)


def _destination(dest: destinations.Destination) -> Destination:
    until = dest.previous_secret_expires_at
    rotating = dest.previous_secret_ref is not None and until is not None and until > datetime.now(UTC)
    return Destination.model_validate({
        "destinationId": dest.destination_id, "kind": dest.kind, "url": dest.url, "signing": dest.signing,
        "artifactTypes": list(dest.artifact_types) if dest.artifact_types else None,
        "ordering": dest.ordering, "allowPrivateNetwork": dest.allow_private_network, "status": dest.status,
        "disabledReason": dest.disabled_reason, "secretRef": destinations.public_secret_ref(dest.secret_ref),
        "previousSecretRef": destinations.public_secret_ref(dest.previous_secret_ref) if rotating else None,
        "previousSecretExpiresAt": until.astimezone(UTC).isoformat().replace("+00:00", "Z")
        if rotating and until is not None else None,
        "circuit": Circuit.model_validate(destinations.circuit_json(dest, datetime.now(UTC)))})


def _secret_input(secret: str | None, secret_ref: str | None) -> tuple[str | None, str | None]:
    """(secret value, `secret:<id>` reference) from a request, refusing anything but a server-issued id as a
    reference. The refusal never echoes the reference and never looks at the file system."""
    if secret is not None and secret_ref is not None:
        raise ValidationError("give secret or secretRef, not both", code="SCHEMA_INVALID", field="secret")
    if secret_ref is None:
        return secret, None
    ref = destinations.stored_secret_ref(secret_ref)
    if ref is None:
        raise ValidationError("secretRef must be the id of a secret this tenant stored (sec_…); paths and other "
                              "references are not accepted", code="SECRET_REF_FORBIDDEN", field="secretRef")
    return None, ref


@router.post("/destinations", status_code=201, summary="Create a webhook destination", response_model=Destination,
             responses=problems("CONFLICT", "DESTINATION_LIMIT_REACHED", *_CHECKS), openapi_extra=IDEMPOTENT)
def create_destination(body: DestinationIn, request: Request, key: ApiKey = require("ops")) -> Response:
    ctx = context(request)
    value, ref = _secret_input(body.secret, body.secretRef)
    if value is None and ref is None:
        raise ValidationError("secret or secretRef is required", code="SCHEMA_INVALID", field="secret")

    def action() -> tuple[int, Destination]:
        dest = destinations.add_destination(
            ctx.db, key.tenant_id, body.destinationId, url=body.url, secret_ref=ref or "", secret_value=value,
            signing=body.signing, artifact_types=body.artifactTypes, ordering=body.ordering,
            allow_private_network=body.allowPrivateNetwork, policy=ctx.destination_policy, actor=key.key_id)
        return 201, _destination(dest)

    with ctx.url_checks.slot(key.tenant_id):  # resolves the host: bounded per tenant
        return idempotency.write(request, key, body.model_dump(), action)


@router.get("/destinations", summary="The tenant's destinations")
def list_destinations(request: Request, key: ApiKey = require("ops")) -> Destinations:
    found = destinations.list_destinations(context(request).db, key.tenant_id)
    return Destinations(destinations=[_destination(d) for d in found])


@router.get("/destinations/{destination_id}", summary="One destination", responses=problems("NOT_FOUND"))
def get_destination(destination_id: DestinationIdPath, request: Request, key: ApiKey = require("ops")) -> Destination:
    return _destination(destinations.get_destination(context(request).db, key.tenant_id, destination_id))


@router.patch("/destinations/{destination_id}", summary="Update a destination (omitted fields are kept)",
              response_model=Destination, responses=problems("NOT_FOUND", *_CHECKS), openapi_extra=IDEMPOTENT)
def update_destination(destination_id: DestinationIdPath, body: DestinationUpdate, request: Request,
                       key: ApiKey = require("ops")) -> Response:
    ctx = context(request)

    value, ref = _secret_input(body.secret, body.secretRef)
    grace = timedelta(seconds=body.secretGraceSeconds) if body.secretGraceSeconds is not None \
        else destinations.DEFAULT_ROTATION_GRACE

    def patched(current: destinations.Destination) -> destinations.Destination:
        """The PATCH's fields over `current`; the others (status and disabledReason included) as they are."""
        types = current.artifact_types if "artifactTypes" not in body.model_fields_set else (
            None if body.artifactTypes is None else tuple(body.artifactTypes))
        return dataclasses.replace(
            current, url=body.url or current.url, secret_ref=ref or current.secret_ref,
            signing=body.signing or current.signing, artifact_types=types, ordering=body.ordering or current.ordering,
            allow_private_network=current.allow_private_network if body.allowPrivateNetwork is None
            else body.allowPrivateNetwork)

    def action() -> tuple[int, Destination]:
        checked = patched(destinations.get_destination(ctx.db, key.tenant_id, destination_id))
        saved = destinations.save_destination(ctx.db, checked, policy=ctx.destination_policy, replace=True,
                                          actor=key.key_id, secret_value=value, rotation_grace=grace,
                                          changes=patched)
        return 200, _destination(saved)

    # the fields given, not their defaults: an omitted artifactTypes (kept) and a null one (every type) differ
    with ctx.url_checks.slot(key.tenant_id):  # resolves the host: bounded per tenant
        return idempotency.write(request, key, body.model_dump(exclude_unset=True), action)


@router.post("/destinations/{destination_id}/disable", summary="Disable a destination", response_model=Destination,
             responses=problems("NOT_FOUND"), openapi_extra=IDEMPOTENT)
def disable_destination(destination_id: DestinationIdPath, request: Request, body: DisableIn | None = None,
                        key: ApiKey = require("ops")) -> Response:
    ctx = context(request)
    reason = body.reason if body is not None else "operator"

    def action() -> tuple[int, Destination]:
        return 200, _destination(destinations.disable_destination(ctx.db, key.tenant_id, destination_id,
                                                              reason=reason, actor=key.key_id, registry=ctx.registry))

    return idempotency.write(request, key, {"reason": reason}, action)


class EnableIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    backfill: bool = False


@router.post("/destinations/{destination_id}/enable", summary="Re-enable a destination",
             response_model=EnabledDestination, openapi_extra=IDEMPOTENT,
             responses=problems("NOT_FOUND", "DESTINATION_URL_FORBIDDEN", "TENANT_QUOTA_EXCEEDED",
                                "DESTINATION_CHECKS_BUSY"),
             description="The answer's `backfill` reports the artifacts built while the destination was disabled "
                         "that have no delivery to it (`missing`, `since`). With `{\"backfill\": true}` those "
                         "deliveries are created and the delivery its 410 failed is requeued (`created`, "
                         "`requeued`); otherwise `POST /v1/deliveries/requeue` with `since` does it later.")
def enable_destination(destination_id: DestinationIdPath, request: Request, body: EnableIn | None = None,
                       key: ApiKey = require("ops")) -> Response:
    ctx = context(request)
    backfill = body.backfill if body is not None else False

    def action() -> tuple[int, EnabledDestination]:
        dest, report = destinations.enable_destination_with_backfill(ctx.db, key.tenant_id, destination_id,
                                                                 policy=ctx.destination_policy, actor=key.key_id,
                                                                 backfill=backfill)
        return 200, EnabledDestination.model_validate({**dict(_destination(dest)), "backfill": report.to_json()})

    with ctx.url_checks.slot(key.tenant_id):  # resolves the host: bounded per tenant
        return idempotency.write(request, key, {"backfill": backfill}, action)


@router.post("/destinations/{destination_id}/requeue", summary="Requeue a destination's failed deliveries",
             response_model=DestinationRequeued, responses=problems("NOT_FOUND"), openapi_extra=IDEMPOTENT)
def requeue_destination(destination_id: DestinationIdPath, request: Request,
                        key: ApiKey = require("ops")) -> Response:
    ctx = context(request)

    def action(tx: Tx) -> tuple[int, DestinationRequeued]:
        n = destinations.requeue_destination(ctx.db, key.tenant_id, destination_id, actor=key.key_id, tx=tx)
        return 200, DestinationRequeued(destinationId=destination_id, requeued=n)

    return idempotency.write_in_transaction(request, key, None, action)
