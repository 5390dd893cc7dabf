"""Operations on destinations and deliveries for the HTTP API, the CLI and the console (spec 06 §1, §5, §9).

Every function takes a `Database`, runs its own short transaction and raises `SettlekitError`s with stable
codes (`DESTINATION_URL_FORBIDDEN`, `SECRET_*`, `NOT_FOUND`, `CONFLICT`, `SCHEMA_INVALID`). Destination saves
run the SSRF guard (DNS included, outside any transaction) and check the secret reference; secret values are
never returned, logged or put in an error. Requeues and status changes are audited on the
`settlekit.delivery.audit` logger.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry

from settlekit.delivery import circuit, enqueue
from settlekit.delivery.errors import WebhookSecretError
from settlekit.delivery.metrics import OPERATOR, metrics_for
from settlekit.delivery.secrets import (
    SECRET_ID_RE,
    SecretRefError,
    SecretResolver,
    db_ref,
    delete_unreferenced,
    secret_id_of,
    store_secret,
)
from settlekit.delivery.signing import SIGNING_MODES, decode_secret
from settlekit.delivery.ssrf import Resolver, SsrfPolicy, VettedDestination, vet_url
from settlekit.errors import ConflictError, NotFoundError, ValidationError
from settlekit.store import deliveries as store
from settlekit.store.db import Database, Tx

if TYPE_CHECKING:
    from settlekit.runtime.settings import Settings

audit = logging.getLogger("settlekit.delivery.audit")

DELIVERY_STATES: Final = ("pending", "delivered", "failed")
DESTINATION_STATUSES: Final = ("active", "disabled")
ORDERINGS: Final = ("best_effort", "strict_scope")
DEFAULT_ROTATION_GRACE: Final = timedelta(hours=24)  # as Svix: the old secret keeps signing for a day
_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # no ':' (dedupe_key separator)
MAX_ARTIFACT_TYPES: Final = 32  # names in a destination's artifact_types (there are fewer kinds of artifact)
MAX_ARTIFACT_TYPE_LENGTH: Final = 100


@dataclass(frozen=True)
class DestinationPolicy:
    """What a deployment lets destinations be saved with. Production: the defaults."""

    allow_insecure_http: bool = False
    allow_loopback: bool = False  # local development and tests
    allow_private_network: bool = False  # private ranges for destinations that opt in (never metadata)
    allowed_networks: tuple[str, ...] = ()  # CIDRs for destinations that opt in (never metadata)
    allow_env_secrets: bool = False
    allow_inline_secrets: bool = False
    check_secret: bool = True  # read the secret on save and check its form (a missing file is refused)
    resolver: Resolver | None = None  # DNS resolver override (tests)
    max_destinations_per_tenant: int | None = None  # a new one beyond: DESTINATION_LIMIT_REACHED (None: no bound)

    @classmethod
    def local(cls) -> DestinationPolicy:
        """http and loopback allowed: a receiver on this machine."""
        return cls(allow_insecure_http=True, allow_loopback=True)

    @classmethod
    def from_settings(cls, settings: Settings) -> DestinationPolicy:
        """The webhook network policy and destination bound the settings ask for (loopback implies http)."""
        return cls(allow_insecure_http=settings.allow_insecure_http or settings.allow_loopback_webhooks,
                   allow_loopback=settings.allow_loopback_webhooks,
                   allow_private_network=settings.allow_private_webhooks,
                   allowed_networks=settings.allowed_webhook_networks,
                   max_destinations_per_tenant=settings.max_destinations_per_tenant)

    def ssrf(self, *, allow_private_network: bool) -> SsrfPolicy:
        """The policy for a destination with this `allowPrivateNetwork` opt-in (it only narrows)."""
        return SsrfPolicy.for_destination(
            tenant_opt_in=allow_private_network,
            allow_private_network=self.allow_private_network,
            allowed_networks=self.allowed_networks,
            allow_loopback=self.allow_loopback,
            allow_insecure_http=self.allow_insecure_http,
        )

    def secrets(self) -> SecretResolver:
        return SecretResolver(allow_env=self.allow_env_secrets, allow_inline=self.allow_inline_secrets)


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(UTC)


def _check_id(value: str, field: str) -> None:
    if not _ID_RE.fullmatch(value):
        raise ValidationError(
            f"{field} must be 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit", field=field
        )


def check_destination_id(value: str) -> None:
    """A destination id: 1-64 characters of [A-Za-z0-9._-], a letter or digit first (SCHEMA_INVALID otherwise)."""
    _check_id(value, "destination_id")


def check_secret_value(value: str, signing: str) -> None:
    """A secret sent by value: one line without white space around it, as it is read back (secrets.resolve splits
    the stored text into lines, Python's: \\v, \\f, U+0085, U+2028 … break one too, and strips them), so it signs
    with what was given; a valid `whsec_` secret when Standard Webhooks signs with it."""
    if not value or value != value.strip() or len(value.splitlines()) != 1:
        raise ValidationError("secret must be one non-empty line without white space around it", field="secret")
    if signing in ("standard", "both"):
        _check_whsec(value)


def stored_secret_ref(secret_id: str) -> str | None:
    """The reference (`secret:<id>`) of a secret a tenant stored, from its id (`sec_…`); None for any other text
    (a path, an env name, a reference), which is never looked at further."""
    return db_ref(secret_id) if SECRET_ID_RE.fullmatch(secret_id) else None


def public_secret_ref(ref: str | None) -> str | None:
    """What a tenant may see of a secret reference: the id of a stored secret, an env name; never a path or value."""
    if ref is None:
        return None
    sid = secret_id_of(ref)
    if sid is not None:
        return sid
    return None if ref.startswith(("inline:", "file:")) else ref


def circuit_json(dest: store.Destination, now: datetime) -> dict[str, object]:
    """The destination's circuit breaker as the API shows it at `now` (state, failures, the next probe)."""
    return circuit.to_json(dest.circuit, now)


def _check_whsec(value: str) -> None:
    try:
        decode_secret(value)
    except WebhookSecretError as exc:  # a caller's bad input: 400, naming no secret material
        raise ValidationError(exc.message, code="WEBHOOK_SECRET_INVALID", field="secret") from exc


def check_destination(dest: store.Destination, policy: DestinationPolicy, *,
                      secret_value: str | None = None) -> VettedDestination:
    """Everything a save checks, without writing: fields, secret (value or reference), SSRF guard (resolves
    DNS). A `secret:<id>` reference is checked against the tenant's stored secrets in the save transaction."""
    if not dest.tenant_id:
        raise ValidationError("tenant_id is required", field="tenant_id")
    _check_id(dest.destination_id, "destination_id")
    if dest.kind != "webhook":
        raise ValidationError(f"unknown destination kind {dest.kind!r}", field="kind")
    if dest.signing not in SIGNING_MODES:
        raise ValidationError(f"unknown signing mode {dest.signing!r}", field="signing")
    if dest.ordering not in ORDERINGS:
        raise ValidationError(f"unknown ordering {dest.ordering!r}", field="ordering")
    types = dest.artifact_types or ()
    if len(types) > MAX_ARTIFACT_TYPES:
        raise ValidationError(f"artifact_types holds at most {MAX_ARTIFACT_TYPES} names", field="artifact_types")
    for t in types:
        if not t or not isinstance(t, str) or len(t) > MAX_ARTIFACT_TYPE_LENGTH:
            raise ValidationError(f"artifact_types must be non-empty strings of at most {MAX_ARTIFACT_TYPE_LENGTH} "
                                  "characters", field="artifact_types")
    if secret_value is not None:
        check_secret_value(secret_value, dest.signing)
    else:
        resolver = policy.secrets()
        resolver.validate(dest.secret_ref)
        if policy.check_secret and secret_id_of(dest.secret_ref) is None:
            values = resolver.resolve(dest.secret_ref)
            if dest.signing in ("standard", "both"):
                for v in values:
                    decode_secret(v)  # WebhookSecretError names no secret material
    return vet_url(
        dest.url, policy.ssrf(allow_private_network=dest.allow_private_network), resolver=policy.resolver
    )


def save_destination(
    db: Database,
    dest: store.Destination,
    *,
    policy: DestinationPolicy | None = None,
    replace: bool = False,
    actor: str | None = None,
    now: datetime | None = None,
    secret_value: str | None = None,
    rotation_grace: timedelta = DEFAULT_ROTATION_GRACE,
    changes: Callable[[store.Destination], store.Destination] | None = None,
) -> store.Destination:
    """Create (or with `replace`, overwrite) a destination after `check_destination`. With `changes` (a PATCH:
    the changes applied to a stored destination), `dest` is what was checked, and what is written is `changes`
    applied to the row as it is once locked in the save's transaction: what another request changed meanwhile
    (a secret rotation, a 410's disable) is kept. When that moves what was checked (the URL, the signing, the
    private-network opt-in), the save is a 409 CONFLICT: the caller retries.

    Nothing is written unless every check passed; the secret (when given by value), the destination and the
    clean-up of the tenant's unused secrets commit in one transaction. Replacing the secret of an existing
    destination is a rotation: the old secret keeps signing (both signatures on every delivery) for
    `rotation_grace`. A new destination is `active`; replacing keeps the stored status unless `dest.status`
    says otherwise. Raises ConflictError when it exists and `replace` is false.
    """
    pol = policy or DestinationPolicy()
    vetted = check_destination(dest, pol, secret_value=secret_value)
    ts = _now(now)
    with db.transaction() as tx:
        existing = store.get_destination(tx, dest.tenant_id, dest.destination_id, lock=changes is not None)
        if existing is not None and not replace:
            raise ConflictError(
                "destination already exists", tenant_id=dest.tenant_id, destination_id=dest.destination_id
            )
        if existing is None and pol.max_destinations_per_tenant is not None:
            _check_destination_count(tx, dest.tenant_id, pol.max_destinations_per_tenant)
        if changes is not None:
            if existing is None:
                raise NotFoundError("destination not found", tenant_id=dest.tenant_id,
                                    destination_id=dest.destination_id)
            merged = changes(existing)
            if _checked_fields(merged) != _checked_fields(dest):
                raise ConflictError("the destination was changed by another request meanwhile; retry",
                                    tenant_id=dest.tenant_id, destination_id=dest.destination_id)
            dest = merged
        ref = _secret_ref_to_store(tx, dest, pol, secret_value)
        previous, until = _previous_secret(existing, ref, ts, rotation_grace)
        if previous is not None and not _can_sign(tx, pol, dest, previous):
            previous, until = None, None  # e.g. a legacy secret while the signing moves to Standard Webhooks
        if dest.status not in DESTINATION_STATUSES:
            raise ValidationError(f"unknown status {dest.status!r}", field="status")
        store.put_destination(tx, dataclasses.replace(dest, secret_ref=ref, previous_secret_ref=previous,
                                                      previous_secret_expires_at=until), now=ts)
        delete_unreferenced(tx, dest.tenant_id, ts)
        saved = store.get_destination(tx, dest.tenant_id, dest.destination_id)
    assert saved is not None
    rotated = previous is not None and existing is not None and existing.secret_ref != saved.secret_ref
    _audit_saved(dest, vetted, replaced=existing is not None, secret_rotated=rotated, actor=actor)
    return saved


def _check_destination_count(tx: Tx, tenant_id: str, limit: int) -> None:
    """A new destination must not take the tenant beyond `limit`. Near the limit the tenant's rows are locked and
    counted again, so two creates there take turns and the second counts the first's row (SQLite's writers take
    turns anyway); only a tenant with no destination yet has no row to lock."""
    names = [d.destination_id for d in store.list_destinations(tx, tenant_id)]
    if len(names) + 1 < limit:
        return
    store.lock_destinations(tx, [(tenant_id, name) for name in names])
    if len(store.list_destinations(tx, tenant_id)) >= limit:
        raise ConflictError(f"the tenant has {limit} destinations, as many as this deployment allows; change one "
                            "of them instead", code="DESTINATION_LIMIT_REACHED", limit=limit)


def _checked_fields(dest: store.Destination) -> tuple[object, ...]:
    """What `check_destination` vetted before the save's transaction (a stored secret is checked in it)."""
    return dest.url, dest.signing, dest.allow_private_network


def _secret_ref_to_store(
    tx: Tx, dest: store.Destination, policy: DestinationPolicy, secret_value: str | None
) -> str:
    """The secret reference the destination is saved with: a secret given by value is stored first; a stored
    secret it names must be the tenant's own (and a valid webhook secret when it signs the standard way)."""
    if secret_value is not None:
        return store_secret(tx, dest.tenant_id, secret_value)
    _check_stored_secret(tx, policy, dest, dest.secret_ref)
    return dest.secret_ref


def _check_stored_secret(tx: Tx, policy: DestinationPolicy, dest: store.Destination, ref: str) -> None:
    """A stored secret (`secret:<id>`) must be the tenant's own, and a valid webhook secret when the destination
    signs the standard way (SECRET_NOT_FOUND, WEBHOOK_SECRET_INVALID); other references are checked elsewhere."""
    if secret_id_of(ref) is not None:
        values = policy.secrets().resolve(ref, tx=tx, tenant_id=dest.tenant_id)  # the tenant's own only
        if dest.signing in ("standard", "both"):
            for v in values:
                _check_whsec(v)


def _can_sign(tx: Tx, policy: DestinationPolicy, dest: store.Destination, ref: str) -> bool:
    """Whether a stored secret can sign the way the destination now signs: Standard Webhooks needs `whsec_`
    secrets. A secret that cannot would make every delivery fail before sending for its whole rotation grace."""
    if dest.signing not in ("standard", "both"):
        return True
    try:
        _check_stored_secret(tx, policy, dest, ref)
    except (ValidationError, SecretRefError):
        return False
    return True


def _previous_secret(
    existing: store.Destination | None, ref: str, now: datetime, rotation_grace: timedelta
) -> tuple[str | None, datetime | None]:
    """`(previous secret ref, until when it still signs)`: a new secret starts a rotation grace, the same secret
    keeps a running one; an expired grace is dropped."""
    previous, until = None, None
    if existing is not None and existing.secret_ref != ref and rotation_grace > timedelta(0):
        previous, until = existing.secret_ref, now + rotation_grace
    elif existing is not None and existing.secret_ref == ref:
        previous, until = existing.previous_secret_ref, existing.previous_secret_expires_at
    if until is not None and until <= now:
        previous, until = None, None
    return previous, until


def _audit_saved(
    dest: store.Destination, vetted: VettedDestination, *, replaced: bool, secret_rotated: bool, actor: str | None
) -> None:
    audit.info(
        "destination saved",
        extra={
            "tenant_id": dest.tenant_id,
            "destination_id": dest.destination_id,
            "url": dest.url,
            "addresses": list(vetted.addresses),
            "replaced": replaced,
            "secret_rotated": secret_rotated,
            "actor": actor,
        },
    )


def add_destination(
    db: Database,
    tenant_id: str,
    destination_id: str,
    *,
    url: str,
    secret_ref: str,
    signing: str = "standard",
    artifact_types: Sequence[str] | None = None,
    ordering: str = "best_effort",
    allow_private_network: bool = False,
    policy: DestinationPolicy | None = None,
    replace: bool = False,
    actor: str | None = None,
    now: datetime | None = None,
    secret_value: str | None = None,
) -> store.Destination:
    """Keyword form of `save_destination` for the API and CLI (give `secret_value` to store the secret in the
    database; `secret_ref` is then ignored)."""
    dest = store.Destination(
        tenant_id=tenant_id,
        destination_id=destination_id,
        url=url,
        secret_ref=secret_ref,
        signing=signing,
        artifact_types=tuple(artifact_types) if artifact_types else None,
        ordering=ordering,
        allow_private_network=allow_private_network,
    )
    return save_destination(db, dest, policy=policy, replace=replace, actor=actor, now=now,
                            secret_value=secret_value)


def get_destination(db: Database, tenant_id: str, destination_id: str) -> store.Destination:
    with db.read() as tx:
        dest = store.get_destination(tx, tenant_id, destination_id)
    if dest is None:
        raise NotFoundError("destination not found", tenant_id=tenant_id, destination_id=destination_id)
    return dest


def list_destinations(db: Database, tenant_id: str) -> list[store.Destination]:
    with db.read() as tx:
        return store.list_destinations(tx, tenant_id)


def disable_destination(
    db: Database,
    tenant_id: str,
    destination_id: str,
    *,
    reason: str = "operator",
    actor: str | None = None,
    now: datetime | None = None,
    registry: CollectorRegistry | None = None,
) -> store.Destination:
    """Stop deliveries to a destination; its pending deliveries wait (not claimed) until it is enabled. `reason`
    is stored as its disabledReason; the metric counts it under the fixed label `operator`."""
    with db.transaction() as tx:
        store.set_destination_status(
            tx, tenant_id, destination_id, status="disabled", reason=reason, now=_now(now)
        )
        dest = store.get_destination(tx, tenant_id, destination_id)
    assert dest is not None
    metrics_for(registry).disabled.labels(OPERATOR).inc()
    audit.info(
        "destination disabled",
        extra={"tenant_id": tenant_id, "destination_id": destination_id, "reason": reason, "actor": actor},
    )
    return dest


@dataclass(frozen=True)
class Backfill:
    """What enabling a destination found (and, with `backfill`, did) for the time it was disabled.

    `since`: when it was disabled (None if it was active); `missing`: artifacts built since then without a
    delivery to it; `created` / `requeued`: delivery rows created and `gone` deliveries requeued."""

    since: datetime | None
    missing: int = 0
    created: int = 0
    requeued: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "since": None if self.since is None else self.since.isoformat().replace("+00:00", "Z"),
            "missing": self.missing,
            "created": self.created,
            "requeued": self.requeued,
        }


# How far before a destination's disable its backfill looks for artifacts without a delivery to it: an artifact
# is stamped with the start of the dispatcher turn that built it, and a turn already running when the destination
# was disabled (or a clock of the API host behind the database's) stamps a time before `disabled_at`. Only
# artifacts that have no delivery to the destination count, never one from before it was last enabled (an
# earlier disabled period whose backfill was declined) or first saved.
BACKFILL_MARGIN: Final = timedelta(minutes=5)


def _backfill_start(tx: Tx, tenant_id: str, destination_id: str, disabled_at: datetime) -> datetime:
    active_since = store.destination_active_since(tx, tenant_id, destination_id)
    start = disabled_at - BACKFILL_MARGIN
    return start if active_since is None else max(start, active_since)


def enable_destination(
    db: Database,
    tenant_id: str,
    destination_id: str,
    *,
    policy: DestinationPolicy | None = None,
    actor: str | None = None,
    now: datetime | None = None,
) -> store.Destination:
    """Re-activate a destination after the SSRF guard passes again (its DNS may have changed)."""
    return enable_destination_with_backfill(
        db, tenant_id, destination_id, policy=policy, actor=actor, now=now, backfill=False
    )[0]


def enable_destination_with_backfill(
    db: Database,
    tenant_id: str,
    destination_id: str,
    *,
    backfill: bool,
    policy: DestinationPolicy | None = None,
    actor: str | None = None,
    now: datetime | None = None,
) -> tuple[store.Destination, Backfill]:
    """Re-activate a destination; report the artifacts built while it was disabled that have no delivery to
    it, and with `backfill` create those deliveries and requeue the one its 410 failed (see
    `backfill_deliveries`). Without `backfill` nothing but the status changes: the report is an offer."""
    current = get_destination(db, tenant_id, destination_id)
    pol = policy or DestinationPolicy()
    vet_url(
        current.url, pol.ssrf(allow_private_network=current.allow_private_network), resolver=pol.resolver
    )
    ts = _now(now)
    with db.transaction() as tx:
        since = store.destination_disabled_at(tx, tenant_id, destination_id) if current.status == "disabled" else None
        start = None if since is None else _backfill_start(tx, tenant_id, destination_id, since)
        store.set_destination_status(tx, tenant_id, destination_id, status="active", reason=None, now=ts)
        dest = store.get_destination(tx, tenant_id, destination_id)
        assert dest is not None
        report = Backfill(since)
        if since is not None and start is not None:
            missing = store.count_missing(tx, dest, since=start)
            report = Backfill(since, missing)
            if backfill:
                report = Backfill(since, missing, enqueue.backfill(tx, dest, since=start, now=ts),
                                  store.requeue_gone(tx, tenant_id, destination_id, since=start, now=ts))
    audit.info(
        "destination enabled",
        extra={"tenant_id": tenant_id, "destination_id": destination_id, "actor": actor, "backfill": report.to_json()},
    )
    return dest, report


def backfill_deliveries(
    db: Database,
    tenant_id: str,
    *,
    since: datetime,
    destination_id: str | None = None,
    actor: str | None = None,
    now: datetime | None = None,
) -> Backfill:
    """`requeue --since`: for the artifacts built at or after `since`, create the delivery rows missing for
    the destination (or for every active destination of the tenant), and requeue the deliveries that failed
    with `gone` since then. Idempotent: a second run creates and requeues nothing new."""
    if since.tzinfo is None:
        raise ValidationError("since must carry a time zone (e.g. 2026-01-02T00:00:00Z)", field="since")
    try:
        since = since.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValidationError("since is out of range", field="since") from None
    ts = _now(now)
    created = requeued = 0
    with db.transaction() as tx:
        if destination_id is not None:
            dest = store.get_destination(tx, tenant_id, destination_id)
            if dest is None:
                raise NotFoundError("destination not found", tenant_id=tenant_id, destination_id=destination_id)
            targets = [dest]
        else:
            targets = store.list_destinations(tx, tenant_id, active_only=True)
        for dest in targets:
            created += enqueue.backfill(tx, dest, since=since, now=ts)
            requeued += store.requeue_gone(tx, tenant_id, dest.destination_id, since=since, now=ts)
    report = Backfill(since, created=created, requeued=requeued)
    audit.info(
        "deliveries backfilled",
        extra={"tenant_id": tenant_id, "destination_id": destination_id, "actor": actor, "backfill": report.to_json()},
    )
    return report


def list_deliveries(
    db: Database,
    tenant_id: str,
    *,
    state: str | None = None,
    destination_id: str | None = None,
    limit: int = 100,
    after_id: int | None = None,
) -> list[store.Delivery]:
    """A page of a tenant's deliveries in id order (`after_id` = last id of the previous page)."""
    if state is not None and state not in DELIVERY_STATES:
        raise ValidationError(f"state must be one of {', '.join(DELIVERY_STATES)}", field="state")
    if not 1 <= limit <= 10000:
        raise ValidationError("limit must be 1..10000", field="limit")
    with db.read() as tx:
        return store.list_deliveries(
            tx, tenant_id, state=state, destination_id=destination_id, limit=limit, after_id=after_id
        )


@dataclass(frozen=True)
class DeliveryDetail:
    delivery: store.Delivery
    attempts: list[tuple[int, int | None, str | None]]  # (attempt, http_status, error)


def get_delivery(db: Database, tenant_id: str, delivery_id: int) -> DeliveryDetail:
    """One delivery of the tenant with its attempt log; NotFoundError for another tenant's id."""
    with db.read() as tx:
        d = store.get_delivery(tx, delivery_id)
        if d is None or d.tenant_id != tenant_id:
            raise NotFoundError("delivery not found", tenant_id=tenant_id, delivery_id=delivery_id)
        return DeliveryDetail(d, store.list_attempts(tx, delivery_id))


def requeue_delivery(
    db: Database, tenant_id: str, delivery_id: int, *, actor: str | None = None, now: datetime | None = None,
    tx: Tx | None = None,
) -> int:
    """failed → pending with attempts reset, due now, same message id. NotFoundError / ConflictError
    (`state` in details) when it is unknown or not failed. Returns 1. In `tx` when given, else its own."""
    if tx is None:
        with db.transaction() as own:
            return requeue_delivery(db, tenant_id, delivery_id, actor=actor, now=now, tx=own)
    n = store.requeue(tx, tenant_id, delivery_id=delivery_id, now=_now(now))
    tx.after_commit(lambda: audit.info(
        "delivery requeued", extra={"tenant_id": tenant_id, "delivery_id": delivery_id, "actor": actor}))
    return n


def requeue_destination(
    db: Database, tenant_id: str, destination_id: str, *, actor: str | None = None, now: datetime | None = None,
    tx: Tx | None = None,
) -> int:
    """Requeue every failed delivery of a destination; returns how many (0 is not an error). In `tx` when given,
    else in a transaction of its own."""
    if tx is None:
        with db.transaction() as own:
            return requeue_destination(db, tenant_id, destination_id, actor=actor, now=now, tx=own)
    if store.get_destination(tx, tenant_id, destination_id) is None:
        raise NotFoundError("destination not found", tenant_id=tenant_id, destination_id=destination_id)
    n = store.requeue(tx, tenant_id, destination_id=destination_id, now=_now(now))
    tx.after_commit(lambda: audit.info(
        "deliveries requeued",
        extra={"tenant_id": tenant_id, "destination_id": destination_id, "count": n, "actor": actor}))
    return n
