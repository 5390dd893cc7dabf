"""Per-app context and the request dependencies: authentication, scopes, rate limit, idempotency keys."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
from fastapi import Depends, Path, Query, Request
from pydantic import AwareDatetime, BeforeValidator
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers

from settlekit.api.admission import BoundedThreadPool, OutboundSlots
from settlekit.api.auth import ApiKey, AuthError, ForbiddenError, KnownKeys, authenticate
from settlekit.api.feed import FeedStreams
from settlekit.api.guards import check_text
from settlekit.api.ratelimit import Quota, RateLimitedError, RateLimiter, RecentKeys, retry_after_seconds
from settlekit.application.artifacts import ArtifactStore
from settlekit.application.database import Database, cursor_secret
from settlekit.application.destinations import DestinationPolicy, ReplayPolicy
from settlekit.application.jobs import MAX_QUEUED_APPENDS, Appender, StreamHead
from settlekit.application.keys import StoredApiKey
from settlekit.cursors import Cursors
from settlekit.errors import NotFoundError, SettlekitError, ValidationError

# Integers a request can carry are bounded to what both backends store (SQLite INTEGER, PostgreSQL BIGINT).
MAX_INT64 = 2**63 - 1
# zero padding allowed; the bounds of each parameter apply after
_DIGITS = re.compile(r"(?P<integer>[0-9]{1,40})(?:\.0{1,40})?")


def _decimal_digits(value: Any) -> Any:
    """An integer in a path or query is written in decimal digits, with a fraction of zeros at most (`5.0` is the
    integer 5, as JSON Schema reads it): not `+1`, ` 1`, `1_000` or `1e3`, which the model's lax integer parsing
    would read as numbers."""
    if isinstance(value, str):
        match = _DIGITS.fullmatch(value)
        if match is None:
            raise ValueError("must be written as 1 to 40 decimal digits (0-9)")
        return match["integer"]
    return value


def _whole_number(value: Any) -> Any:
    """A JSON number with a fraction of zeros (`5.0`) is that integer, as JSON Schema and JavaScript read it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


WholeNumber = BeforeValidator(_whole_number)
"""For an integer member of a strict request model: 5.0 is accepted as 5."""
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
                      r"([Zz]|[+-][0-9]{2}:[0-9]{2})")


def is_rfc3339(value: Any) -> bool:
    """Whether `value` is written as an RFC 3339 date-time with an offset (the OpenAPI `date-time` format)."""
    return isinstance(value, str) and _RFC3339.fullmatch(value) is not None


def _rfc3339(value: Any) -> Any:
    """An instant is written as RFC 3339 says: not a number of seconds, a date alone or a space for the `T`,
    which the model's lax parsing would read."""
    if not is_rfc3339(value):
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-01-31T23:59:59Z")
    return value


Instant = Annotated[AwareDatetime, BeforeValidator(_rfc3339)]
"""A date-time in a request (query or body): RFC 3339 with an offset."""


DecimalDigits = BeforeValidator(_decimal_digits)
# the FastAPI marker first: after a validator, its bounds reach the document as `ge`/`le`, which JSON Schema ignores
IdPath = Annotated[int, Path(ge=0, le=MAX_INT64), DecimalDigits]
PositionQuery = Annotated[int, Query(ge=0, le=MAX_INT64), DecimalDigits]
OptionalPositionQuery = Annotated[int | None, Query(ge=0, le=MAX_INT64), DecimalDigits]
# an opaque token the API returned (settlekit/cursors.py); a number in its place is 400 CURSOR_NUMERIC
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,200}$"
# Text ids in a path are bounded like the ids they name (job, account, signer key and consumer names: 1..200
# characters; destinations 1..64; artifact ids join a job id and an event id): a longer one is 400 SCHEMA_INVALID,
# and every write's idempotency record, which holds the path, stays within what the backends index.
TextIdPath = Annotated[str, Path(min_length=1, max_length=200)]
DestinationIdPath = Annotated[str, Path(min_length=1, max_length=64)]
ArtifactIdPath = Annotated[str, Path(min_length=1, max_length=500)]
MAX_PAGE = 500  # the largest `limit` of a paged listing
PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE), DecimalDigits]
AUTH_THREADS = 8  # see ApiContext.auth_threads


@dataclass
class ApiContext:
    db: Database
    appender: Appender
    limiter: RateLimiter
    artifacts: ArtifactStore
    destination_policy: DestinationPolicy
    operator_tenant: str
    registered_consumers: Sequence[str] | None = None
    registry: Any = None  # where the API's metrics are created
    exposed_registry: Any = None  # what /metrics renders, when not `registry` (serve --workers N: every process's)
    idempotency_wait: float = 15.0  # seconds a request waits for a concurrent one holding its idempotency key
    auth_failures: RateLimiter = field(default_factory=lambda: RateLimiter(1.0, 20, max_entries=50_000))
    recent_keys: RecentKeys = field(default_factory=RecentKeys)  # let through an address over `auth_failures`
    # /readyz runs on threads of its own, so it answers even when every API thread waits on the database
    ready_threads: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(2))
    feed: FeedStreams | None = None  # the event feed's reader and open streams
    replay_policy: ReplayPolicy = field(default_factory=ReplayPolicy)
    # test sends wait on a tenant's URL: a few per tenant, and never more than an eighth of the routed requests
    test_sends: OutboundSlots = field(default_factory=lambda: OutboundSlots(per_tenant=2, total=32, timeout=10.0))
    # saving or enabling a destination resolves its host (the SSRF guard) on a worker thread
    url_checks: OutboundSlots = field(default_factory=lambda: url_check_slots(256))
    # the append route's authentication and prefetch (one short round trip each) run on a few threads of their own:
    # they keep up with the loop, and anyio's default of 40 threads only adds contention for the interpreter lock.
    # Their queue is bounded: a stalled database must not pile up requests (api/admission.py).
    # By default they hold as many requests, running or queued, as the group commit holds appends (one more: 503
    # OVERLOADED at once; SETTLEKIT_MAX_QUEUED_APPENDS sets both).
    auth_threads: BoundedThreadPool = field(default_factory=lambda: auth_thread_pool(MAX_QUEUED_APPENDS))
    # the append route's keys known from an earlier authentication in this process (api.auth.KnownKeys)
    known_keys: KnownKeys = field(default_factory=KnownKeys)
    extra: dict[str, Any] = field(default_factory=dict)
    # the opaque, tenant-bound tokens shown for event positions and delivery ids (settlekit/cursors.py)
    cursors: Cursors = field(init=False)

    def __post_init__(self) -> None:
        self.cursors = Cursors(functools.partial(cursor_secret, self.db))


async def cursors_ready(ctx: ApiContext) -> Cursors:
    """The context's cursors with their secret read: the first use reads it from the database on a worker
    thread, never on the event loop."""
    if not ctx.cursors.loaded:
        await anyio.to_thread.run_sync(ctx.cursors.load)
    return ctx.cursors


def url_check_slots(max_routed_requests: int) -> OutboundSlots:
    """Destination saves and enables in progress (each resolves a host name that may answer slowly): 4 per tenant,
    and at most a sixteenth of the routed requests (16 of anyio's 40 threads at the default)."""
    return OutboundSlots(per_tenant=4, total=max(1, min(16, max_routed_requests // 16)), timeout=5.0,
                         code="DESTINATION_CHECKS_BUSY", what="destination saves")


def auth_thread_pool(max_queued: int) -> BoundedThreadPool:
    """The append route's authentication threads, holding at most `max_queued` requests."""
    return BoundedThreadPool(AUTH_THREADS, max_queued, thread_name_prefix="settlekit-auth")


def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.settlekit
    return ctx


def job_head(ctx: ApiContext, tenant: str, job_id: str) -> tuple[StreamHead, dict[str, Any] | None]:
    """The job's stream head and stored state; JOB_NOT_FOUND unless `job_id` is a job of `tenant`."""
    head, state = ctx.appender.streams.head_and_snapshot(tenant, job_id)
    if head is None or head.stream_type != "job":
        raise job_not_found(job_id)
    return head, state


def job_not_found(job_id: str) -> NotFoundError:
    """The 404 for a job id that is not a job of the key's tenant."""
    return NotFoundError(f"job {job_id} not found", code="JOB_NOT_FOUND", jobId=job_id)


def bearer_token(headers: Headers) -> str | None:
    """The key of `Authorization: Bearer sk_…`, the one documented way to authenticate (OpenAPI
    `securitySchemes.apiKey`); no other header is read."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return None


def require(scope: str, *, operator: bool = False) -> Any:
    """Dependency: the authenticated key, rate-limited, holding `scope` (and for deployment-wide operations,
    belonging to the operator tenant)."""

    async def dependency(request: Request) -> ApiKey:
        # async: no thread hop, as api.middleware has authenticated the request already
        ctx = context(request)
        key: ApiKey | None = getattr(request.state, "api_key", None)
        if key is None:
            key = await run_in_threadpool(authenticate_request, ctx, request.headers,
                                          request.client.host if request.client else None)
            request.state.api_key = key
        check_scope(ctx, key, scope, operator=operator)
        return key

    dependency.__name__ = f"require_{scope.replace(':', '_')}"
    return Depends(dependency)


def check_scope(ctx: ApiContext, key: ApiKey, scope: str, *, operator: bool = False) -> None:
    """SCOPE_REQUIRED unless `key` holds `scope`; OPERATOR_TENANT_REQUIRED for a deployment-wide operation
    (`operator`) by a key of another tenant than the operator's. Every route and console page checks this way."""
    if not key.allows(scope):
        raise ForbiddenError(f"this API key lacks the {scope!r} scope", code="SCOPE_REQUIRED", scope=scope)
    if operator and key.tenant_id != ctx.operator_tenant:
        raise ForbiddenError("deployment-wide operations need a key of the operator tenant",
                             code="OPERATOR_TENANT_REQUIRED")


def authenticate_request(ctx: ApiContext, headers: Headers, client: str | None = None) -> ApiKey:
    """The request's key (AuthError otherwise), after taking a token from its rate-limit bucket."""
    return authenticate_with_quota(ctx, headers, client)[0]


def authenticate_with_quota(ctx: ApiContext, headers: Headers, client: str | None = None,
                            lookup: Callable[[str], StoredApiKey | None] | None = None, *, spend: bool = True,
                            ) -> tuple[ApiKey, Quota | None]:
    """The request's key (AuthError otherwise) and its rate-limit bucket after taking a token (None when rate
    limiting is off); RateLimitedError when the bucket is empty. Failed authentications are rate-limited per client
    address: an address that keeps presenting bad keys gets 429 before its keys are even looked up, except for a
    key that authenticated in this process within the last hour (`RecentKeys`). `spend=False`: the request
    already took its token (the bucket is None)."""
    address = client or "unknown"
    token = bearer_token(headers)
    wait = ctx.auth_failures.peek(address)
    if wait > 0 and token not in ctx.recent_keys:
        raise SettlekitError("too many failed authentications from this address", code="RATE_LIMITED", status=429,
                             retryAfterSeconds=retry_after_seconds(wait))
    try:
        key = authenticate(ctx.db, token, lookup)
    except AuthError:
        ctx.auth_failures.take(address)
        if token is not None:
            ctx.recent_keys.discard(token)
        raise
    if token is not None:  # always (no token is UNAUTHENTICATED)
        ctx.recent_keys.add(token)
    if not spend:
        return key, None
    quota = ctx.limiter.acquire(key.key_id)
    if quota is not None and quota.wait > 0:
        raise RateLimitedError("rate limit exceeded for this API key", quota)
    return key, quota


def require_scopes(key: ApiKey, scopes: Sequence[str]) -> None:
    for scope in scopes:
        if not key.allows(scope):
            raise ForbiddenError(f"this API key lacks the {scope!r} scope", code="SCOPE_REQUIRED", scope=scope)


def idempotency_key(request: Request) -> str | None:
    """The request's Idempotency-Key, else its X-Idempotency-Key (the older name); each one given must be 1..500
    characters (SCHEMA_INVALID), the one not used too, as the OpenAPI document states for both."""
    chosen: str | None = None
    for name in ("Idempotency-Key", "X-Idempotency-Key"):
        value = request.headers.get(name)
        if value is None:
            continue
        if not value or len(value) > 500:
            raise ValidationError(f"{name} must be 1..500 characters", code="SCHEMA_INVALID", field=name)
        value = check_text(value, name)
        chosen = value if chosen is None else chosen
    return chosen


Handler = Callable[[], tuple[int, Any]]
