"""Jobs: create, append events (server-draft or client-finalized), list, snapshot, read and export the stream.

A job's events are a sub-resource of the job, and creating a job is an append of JOB_CREATED: both go through
`_append` here, and both are counted and timed per outcome (`settlekit_append_total{outcome}`,
`settlekit_append_duration_seconds{outcome}`)."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, overload

from fastapi import APIRouter, Query, Request
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from starlette.responses import Response

from settlekit.api.auth import ApiKey
from settlekit.api.deps import (
    ApiContext,
    PageLimit,
    PositionQuery,
    TextIdPath,
    context,
    cursors_ready,
    idempotency_key,
    job_head,
    job_not_found,
    require,
    require_scopes,
)
from settlekit.api.guards import parse_body
from settlekit.api.idempotency import request_hash, request_target
from settlekit.api.openapi import (
    CHAIN_HEADERS,
    IDEMPOTENCY_HEADERS,
    IDEMPOTENT,
    JS_NONBLANK,
    NO_SPACE,
    PAYLOAD_NAME,
    PAYLOAD_VALUE_REF,
    problems,
    request_headers,
)
from settlekit.api.responses import JsonResponse, TypedRoute, content_disposition
from settlekit.api.schemas import Appended, EventExport, JobEvents, JobList, JobSummary, JobView
from settlekit.application import jobs as streams
from settlekit.application.jobs import (
    AppendOptions,
    AppendResult,
    CachedStream,
    CachedStreamStale,
    Idempotency,
    StreamHead,
    StreamPrecondition,
    StreamRead,
    named_key_ids,
)
from settlekit.application.keys import StoredApiKey
from settlekit.errors import CATALOGUE, ConflictError, SettlekitError, ValidationError
from settlekit.events.canonical import MAX_SAFE_INTEGER
from settlekit.jobs.reducer import DEFAULT_TENANT_ID
from settlekit.jobs.types import KNOWN_EVENT_TYPES, required_signer_kind
from settlekit.metrics import PerRegistry

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=TypedRoute)

# Server-only types that move money or claims: appending them needs finance:write as well as jobs:write.
FINANCE_TYPES = frozenset({"SETTLED", "JOB_ADJUSTED", "SLA_CREDIT_ISSUED", "OPERATOR_COST_RECORDED",
                           "INSURER_REIMBURSEMENT_RECORDED"})
FINANCE_PREFIXES = ("CLAIM_",)
PREV_HEADERS = ("x-expected-prev-chain-hash", "x-proxy-expected-prev-chain-hash")
DEFAULT_ACTOR = {"type": "system", "id": "api"}

# The codes an append can answer besides the shared ones (openapi.document): the event checks, the chain, the
# signer policy, the job's rules and the ledger's (the catalogue's section from JOB_ID_MISMATCH on).
_RULES = list(CATALOGUE)
_DOMAIN_RULES = _RULES[_RULES.index("JOB_ID_MISMATCH"):_RULES.index("SLA_CREDIT_MAX_EXCEEDED") + 1]
APPEND_CODES = (
    "SCHEMA_INVALID", "JSON_INVALID", "PAYLOAD_TOO_LARGE", "FUTURE_TIMESTAMP", "EVENT_TYPE_UNKNOWN",
    "EVENT_TYPE_NOT_ALLOWED", "STREAM_MISMATCH", "ZONE_SET_INVALID", "CONTRACT_INVALID", "JOB_STATE_INVALID",
    "ENVELOPE_VERSION_UNSUPPORTED", "CHAIN_BREAK", "PAYLOAD_HASH_MISMATCH", "CHAIN_HASH_MISMATCH", "SIG_INVALID",
    "SIGNER_KEY_ID_REQUIRED", "SIGNER_UNKNOWN", "SIGNER_KEY_NOT_ACTIVE", "SIGNER_KEY_PURPOSE_MISMATCH",
    "SIGNER_POLICY_VIOLATION", "PREV_CHAIN_HASH_MISMATCH", "VERSION_CONFLICT", "EVENT_ID_CONFLICT",
    "INVALID_TRANSITION", "LEDGER_POSTING_INVALID", "CONFLICT", "JOB_TENANT_MISMATCH", "OVERLOADED", *_DOMAIN_RULES)
ALREADY_THERE = {"description": "The same events were already at the stream's head (`alreadyExists`): nothing "
                                "was added.", "model": Appended}
_ATTACHMENT = {"headers": {"Content-Disposition": {"description": "attachment; filename=\"<jobId>.json\"",
                                                   "required": True, "schema": {"type": "string"}}}}


# created: 201; existing: the same events were already there (200); replayed: an Idempotency-Key's stored answer;
# conflict: 409 (chain head moved, job exists, idempotency conflict); refused: any other 4xx; error: 5xx
APPEND_OUTCOMES = ("created", "existing", "replayed", "conflict", "refused", "error")


class _AppendMetrics:
    def __init__(self, registry: CollectorRegistry):
        total = Counter("settlekit_append", "Append requests (job creation and event appends) by outcome",
                        ["outcome"], registry=registry)
        duration = Histogram("settlekit_append_duration_seconds", "Append request handling time by outcome",
                             ["outcome"], registry=registry,
                             buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        # children made once: every outcome is exported from the start (at 0), and no label lookup per request
        self.by_outcome = {o: (total.labels(o), duration.labels(o)) for o in APPEND_OUTCOMES}

    def observe(self, outcome: str, seconds: float) -> None:
        count, duration = self.by_outcome[outcome]
        count.inc()
        duration.observe(seconds)


append_metrics_for: PerRegistry[_AppendMetrics] = PerRegistry(_AppendMetrics)
AnswerT = TypeVar("AnswerT")


@overload
async def measured_append(ctx: ApiContext, appending: Awaitable[AppendResult]) -> Response: ...


@overload
async def measured_append(ctx: ApiContext, appending: Awaitable[AppendResult],
                          respond: Callable[[AppendResult], Awaitable[AnswerT]]) -> AnswerT: ...


async def measured_append(ctx: ApiContext, appending: Awaitable[AppendResult],
                          respond: Callable[[AppendResult], Awaitable[Any]] | None = None) -> Any:
    """The answer to an append request (`appending` runs it; `respond` makes the answer of its result, a Response
    or a typed answer; by default this API's), counted and timed by outcome."""
    started = time.perf_counter()
    outcome: str | None = "error"
    try:
        result = await appending
        outcome = "replayed" if result.replayed else "existing" if result.already_exists else "created"
        if respond is None:
            await cursors_ready(ctx)
            return _append_response(ctx, result)
        return await respond(result)
    except SettlekitError as exc:
        outcome = "conflict" if exc.status == 409 else "refused" if exc.status < 500 else "error"
        raise
    except CachedStreamStale:
        outcome = None  # done again from a fresh read: that one is counted
        raise
    finally:
        if outcome is not None:
            append_metrics_for(ctx.registry).observe(outcome, time.perf_counter() - started)


def is_finance_type(event_type: Any) -> bool:
    return isinstance(event_type, str) and (event_type in FINANCE_TYPES or event_type.startswith(FINANCE_PREFIXES))


SERVER_DRAFT_ACTOR: dict[str, Any] = {"not": {"enum": ["robot", "operator"]},
                                      "description": "not robot or operator: their events are signed by their keys"}


class Actor(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: str = Field(min_length=1, max_length=200, json_schema_extra=SERVER_DRAFT_ACTOR)
    id: str = Field(min_length=1, max_length=200)


def _optional_text() -> dict[str, Any]:
    return {"anyOf": [{"type": "string"}, {"type": "null"}]}


# What the append checks of a JOB_CREATED payload (jobs.validate), in the document
JOB_CREATED_PAYLOAD: dict[str, Any] = {
    "type": "object", "required": ["templateId"], "propertyNames": PAYLOAD_NAME,
    "additionalProperties": {"$ref": PAYLOAD_VALUE_REF},
    "properties": {
        "templateId": {"type": "string", "pattern": JS_NONBLANK},
        "constraints": {"anyOf": [{"type": "object", "propertyNames": PAYLOAD_NAME,
                                   "properties": {"zoneId": _optional_text()},
                                   "additionalProperties": {"$ref": PAYLOAD_VALUE_REF}}, {"type": "null"}]},
        **{name: _optional_text() for name in ("tenantId", "customerId", "siteId", "contractId")},
    },
}


class CreateJob(BaseModel):
    """JOB_CREATED as a server draft. `payload` is the JOB_CREATED payload (templateId, constraints, …);
    its tenantId defaults to the key's tenant, and may only name it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    jobId: str | None = Field(default=None, min_length=1, max_length=200, pattern=NO_SPACE)
    actor: Actor | None = None
    payload: dict[str, Any] = Field(json_schema_extra=JOB_CREATED_PAYLOAD)


def _appended(ctx: ApiContext, result: AppendResult) -> Appended:
    state = result.snapshot
    positions = ctx.cursors.encode_all("event", result.tenant_id, result.positions)  # the tenant's cursors
    return Appended(jobId=result.stream_id, events=result.events, firstSeq=result.first_seq, positions=positions,
                    headChainHash=result.head_chain_hash,
                    job=state.get("snapshot") if isinstance(state, dict) else None,
                    alreadyExists=result.already_exists)


def _append_response(ctx: ApiContext, result: AppendResult) -> JsonResponse:
    status = 200 if result.already_exists else 201
    headers = {"Idempotent-Replayed": "true"} if result.replayed else None
    return JsonResponse(_appended(ctx, result), status_code=status, headers=headers)


async def append_with_key(ctx: ApiContext, key: ApiKey, request: Request, job_id: str, items: list[dict[str, Any]],
                  expected: Any, idem_key: str | None, body: Any, *, expected_given: bool,
                  precondition: StreamPrecondition | None = None,
                  prefetched: StreamRead | CachedStream | None = None, finalized: bool = False) -> AppendResult:
    """The append on the event loop (Appender.append_async): the checks run here, the commit is awaited. The
    expected head is part of an idempotent request's identity for drafts only: finalized events carry it in the
    body, so a retry is the same request whether or not it also sends the header."""
    idem = None
    if idem_key is not None:
        path = request.url.path
        target = request_target(request)
        idem = Idempotency(key=idem_key, principal_id=key.key_id, endpoint=f"POST {path}",
                           request_hash=request_hash("POST", target, body,
                                                     expected if expected_given and not finalized else None))
        if finalized and expected_given:
            # keys stored while the header was hashed with finalized events too still replay
            idem.earlier_hashes = (request_hash("POST", target, body, expected),)
    options: AppendOptions = {"idempotency": idem, "precondition": precondition, "prefetched": prefetched}
    if isinstance(prefetched, CachedStream):  # the key came from api.auth.KnownKeys: its commit checks it
        options["active_api_key"] = key.key_id
    if expected_given:
        options["expected_prev_chain_hash"] = expected
    try:
        return await ctx.appender.append_async(key.tenant_id, job_id, items, **options)
    except ConflictError as exc:
        if exc.code == "IDEMPOTENCY_KEY_REUSED":
            raise ConflictError(exc.message, code="IDEMPOTENCY_CONFLICT", **exc.details) from None
        raise


@router.post("/jobs", status_code=201, summary="Create a job (server-draft JOB_CREATED)", response_model=Appended,
             responses={200: ALREADY_THERE, **problems("JOB_ALREADY_EXISTS", *APPEND_CODES)},
             openapi_extra=IDEMPOTENT)
async def create_job(body: CreateJob, request: Request, key: ApiKey = require("jobs:write")) -> Response:
    # FastAPI checked the body's shape; it is read again as settld reads a body (UTF-8 only, JavaScript's trim and
    # numbers), so the payload holds what JSON.parse gives
    try:
        body = CreateJob.model_validate(parse_body(await request.body()))
    except PydanticValidationError as exc:  # what FastAPI's reading of the same bytes let through
        raise ValidationError(f"body: {exc.errors()[0]['msg']}", code="SCHEMA_INVALID", field="body") from None
    return await measured_append(context(request), _create_job(body, request, key))


async def _create_job(body: CreateJob, request: Request, key: ApiKey) -> AppendResult:
    ctx = context(request)
    job_id = body.jobId or f"job_{uuid.uuid4()}"
    payload = dict(body.payload)
    payload.setdefault("tenantId", key.tenant_id)
    _require_own_tenant(key, payload)
    actor = body.actor.model_dump() if body.actor is not None else dict(DEFAULT_ACTOR)
    draft = {"type": "JOB_CREATED", "actor": actor, "payload": payload}
    try:
        return await append_with_key(ctx, key, request, job_id, [draft], None, idempotency_key(request),
                             body.model_dump(exclude_none=True), expected_given=True)
    except ConflictError as exc:
        if exc.code == "PREV_CHAIN_HASH_MISMATCH":
            raise ConflictError(f"job {job_id} already exists", code="JOB_ALREADY_EXISTS", jobId=job_id) from None
        raise


FINALIZED_KEYS = ("payloadHash", "chainHash", "signature", "signerKeyId", "prevChainHash")

_NON_EMPTY: dict[str, Any] = {"type": "string", "minLength": 1}
_EVENT_ID: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": NO_SPACE}
_HEX64: dict[str, Any] = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_TYPE: dict[str, Any] = {"type": "string", "enum": sorted(KNOWN_EVENT_TYPES)}
# a draft is signed by the server key: the types a robot's or an operator's key must sign are not drafts
_DRAFT_TYPE: dict[str, Any] = {"type": "string", "enum": sorted(
    t for t in KNOWN_EVENT_TYPES if required_signer_kind(t, "server") == "server")}
# ISO-8601's extended calendar form with a time zone (append.policy), as RFC 3339 writes it
_AT: dict[str, Any] = {"type": "string", "format": "date-time",
                       "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?"
                                  "(Z|[+-][0-9]{2}:[0-9]{2})$",
                       "description": "not more than 5 minutes after the server's clock"}
_ACTOR: dict[str, Any] = {"type": "object", "required": ["type", "id"], "additionalProperties": False,
                          "properties": {"type": _NON_EMPTY, "id": _NON_EMPTY}}
_DRAFT_ACTOR: dict[str, Any] = {**_ACTOR, "properties": {"type": {**_NON_EMPTY, **SERVER_DRAFT_ACTOR},
                                                         "id": _NON_EMPTY}}
_VERSION: dict[str, Any] = {"const": 1}
_PAYLOAD: dict[str, Any] = {"$ref": PAYLOAD_VALUE_REF}
_DRAFT: dict[str, Any] = {
    "type": "object", "title": "EventDraft", "required": ["type", "actor"], "additionalProperties": False,
    "description": "A server draft: the server adds id (unless given), at (unless given), the hashes and its "
                   "signature.",
    "properties": {"type": _DRAFT_TYPE, "actor": _DRAFT_ACTOR, "payload": _PAYLOAD, "id": _EVENT_ID, "at": _AT}}
_ENVELOPE: dict[str, Any] = {
    "type": "object", "title": "EventEnvelope", "additionalProperties": False,
    "required": ["v", "id", "at", "streamId", "type", "actor", "payload", "payloadHash", "prevChainHash",
                 "chainHash", "signature", "signerKeyId"],
    "description": "A client-finalized event: its hashes and signature must verify.",
    "properties": {"v": {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
                   "id": _EVENT_ID, "at": _AT, "streamId": _NON_EMPTY,
                   "type": _TYPE, "actor": _ACTOR, "payload": _PAYLOAD, "payloadHash": _HEX64,
                   "prevChainHash": {"anyOf": [_HEX64, {"type": "null"}]}, "chainHash": _HEX64,
                   "signature": {"anyOf": [_NON_EMPTY, {"type": "null"}]},
                   "signerKeyId": {"anyOf": [_NON_EMPTY, {"type": "null"}]},
                   "schemaVersion": _VERSION, "schema_version": _VERSION}}

_EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {
            "oneOf": [_DRAFT, _ENVELOPE, {"type": "array", "items": _DRAFT, "minItems": 1},
                      {"type": "array", "items": _ENVELOPE, "minItems": 1}],
            "description": "A server draft {type, actor, payload} or a client-finalized envelope, or a list of "
                           "either (one stream, chained in order). Drafts need the x-expected-prev-chain-hash "
                           "header (\"null\" or empty = the stream must be empty); with client-finalized events "
                           "it is optional and, when given, must be the stream's head as well (the "
                           "x-proxy- name is ignored there, as settld does). A client-finalized event carries "
                           "the signature its type needs (a robot, operator or server key); one of a "
                           "server-signed type that the client cannot sign is sent as a draft, which the server "
                           "signs. Each event type has rules of its own for its payload (refused with "
                           "SCHEMA_INVALID naming the type in `details.eventType`).",
        }}},
    },
}


@router.post("/jobs/{job_id}/events", status_code=201, summary="Append events to a job stream",
             response_model=Appended,
             responses={200: ALREADY_THERE, **problems("JOB_NOT_FOUND", "PRECONDITION_REQUIRED", *APPEND_CODES)},
             openapi_extra={**_EVENTS_BODY, **request_headers(*IDEMPOTENCY_HEADERS, *CHAIN_HEADERS)})
async def append_events(job_id: TextIdPath, request: Request, key: ApiKey = require("jobs:write")) -> Response:
    """FastAPI's way in: a body without Content-Length (api.middleware serves the others itself, reading the key
    and the stream together); the OpenAPI document's operation. Both go on in `append_job_events`."""
    return await append_job_events(context(request), request, key, await request.body(), None)


@dataclass(frozen=True)
class _Prefetched:
    """What the append route read with the API key: the parsed body (_UNPARSED when it did not parse: the handler
    parses it again for its error) and the job's stream in the key's tenant (or its entry in the appender's
    stream cache)."""

    body: Any
    stream: StreamRead | CachedStream


_UNPARSED: Any = object()


def _body_and_key_ids(raw: bytes) -> tuple[Any, frozenset[str]]:
    """The body as parsed (_UNPARSED when it does not parse) and the signer key ids its events name."""
    try:
        body = parse_body(raw)
    except SettlekitError:
        return _UNPARSED, frozenset()
    return body, named_key_ids(body if isinstance(body, list) else [body])


def prefetch_append(ctx: ApiContext, request: Request, key_id: str, raw: bytes
                    ) -> tuple[StoredApiKey | None, _Prefetched | None]:
    """The presented key's row and the job's stream (head, stored state, the signer keys the body names), read in
    one statement before the key is checked (api.middleware DirectPrefetch)."""
    body, key_ids = _body_and_key_ids(raw)
    found = ctx.appender.streams.api_key_and_stream(key_id, request.path_params["job_id"], key_ids)
    if found is None:
        return None, None
    return found[0], _Prefetched(body, found[1])


def cached_append_prefetch(ctx: ApiContext, request: Request, stored: StoredApiKey, raw: bytes
                            ) -> _Prefetched | None:
    """What `prefetch_append` would read, from this process's stream cache (the key's row is known already), or
    None when the job's stream is not there or the body does not parse (the read path answers it). A request with
    an idempotency key always reads."""
    headers = request.headers
    if "idempotency-key" in headers or "x-idempotency-key" in headers:
        return None
    body, key_ids = _body_and_key_ids(raw)
    if body is _UNPARSED:
        return None
    stream = ctx.appender.stream_cache.get(stored.tenant_id, request.path_params["job_id"], key_ids)
    return None if stream is None else _Prefetched(body, stream)


async def append_job_events(ctx: ApiContext, request: Request, key: ApiKey, raw: bytes,
                            prefetched: _Prefetched | None) -> Response:
    """The one append of events to a job, however the request came in: api.middleware's direct route (the request
    authenticated with the stream read alongside: `prefetched`) or FastAPI's `append_events` (None). The body is
    checked, the appender (`ctx.appender`, append/appender.py) commits, the answer is counted by outcome."""
    require_scopes(key, ["jobs:write"])
    job_id: str = request.path_params["job_id"]
    return await measured_append(ctx, _append_events(ctx, job_id, request, key, raw, prefetched))


# routes api.middleware serves directly, by path: the hot path of appends (FastAPI keeps them for the schema)
DIRECT_HANDLERS = {"/v1/jobs/{job_id}/events": append_job_events}
DIRECT_PREFETCH = {"/v1/jobs/{job_id}/events": prefetch_append}
DIRECT_CACHED = {"/v1/jobs/{job_id}/events": cached_append_prefetch}


async def _append_events(ctx: ApiContext, job_id: str, request: Request, key: ApiKey, raw: bytes,
                         prefetched: _Prefetched | None = None) -> AppendResult:
    body = prefetched.body if prefetched is not None and prefetched.body is not _UNPARSED else parse_body(raw)
    items = body if isinstance(body, list) else [body]
    if not items or not all(isinstance(i, dict) for i in items):
        raise ValidationError("body must be an event object or a non-empty list of event objects",
                              code="SCHEMA_INVALID", field="body")
    finance = sorted({i.get("type") for i in items if is_finance_type(i.get("type"))})
    if finance:
        require_scopes(key, ["finance:write"])
    finalized = any(k in i for i in items for k in FINALIZED_KEYS)
    items = [_with_own_tenant(key, item, finalized) for item in items]
    expected: Any = None
    given = False
    # with client-finalized events only settlekit's own header counts: settld ignores its x-proxy- header there
    for name in PREV_HEADERS[:1] if finalized else PREV_HEADERS:
        value = request.headers.get(name)
        if value is not None:
            given = True
            expected = None if value.strip() in ("", "null") else value.strip()
            break
    return await append_with_key(ctx, key, request, job_id, items, expected, idempotency_key(request), body,
                         expected_given=given, precondition=_job_stream(job_id, items),
                         prefetched=prefetched.stream if prefetched is not None else None, finalized=finalized)


def _require_own_tenant(key: ApiKey, payload: Any) -> None:
    """A job belongs to the tenant whose stream holds it: JOB_CREATED may not name another tenant (the job's
    artifacts, signed by the server, would name it). An absent tenantId means settld's default tenant."""
    claimed = payload.get("tenantId") if isinstance(payload, dict) else None
    if (claimed if claimed is not None else DEFAULT_TENANT_ID) != key.tenant_id:
        raise SettlekitError("payload.tenantId of JOB_CREATED must be the API key's tenant",
                             code="JOB_TENANT_MISMATCH", status=403, field="payload.tenantId")


def _with_own_tenant(key: ApiKey, item: dict[str, Any], finalized: bool) -> dict[str, Any]:
    """Checks a JOB_CREATED item's tenant; a server draft without one gets the key's tenant (as POST /jobs)."""
    if item.get("type") != "JOB_CREATED":
        return item
    payload = item.get("payload")
    if not finalized and isinstance(payload, dict) and payload.get("tenantId") is None:
        item = {**item, "payload": {**payload, "tenantId": key.tenant_id}}
        payload = item["payload"]
    _require_own_tenant(key, payload)
    return item


def _job_stream(job_id: str, items: list[dict[str, Any]]) -> StreamPrecondition:
    """The events go to an existing job stream, or create one with JOB_CREATED: else JOB_NOT_FOUND (checked by the
    append on the head it reads, before anything else)."""
    creates = items[0].get("type") == "JOB_CREATED"

    def check(head: StreamHead | None) -> None:
        if (head is None and not creates) or (head is not None and head.stream_type != "job"):
            raise job_not_found(job_id)

    return check


@router.get("/jobs", summary="List the tenant's jobs (keyset pagination)", responses=problems("CURSOR_INVALID"))
def list_jobs(request: Request, key: ApiKey = require("jobs:read"),
              status: Annotated[str | None, Query(max_length=64)] = None,
              limit: PageLimit = 50,
              cursor: Annotated[str | None, Query(max_length=400)] = None) -> JobList:
    ctx = context(request)
    after = _decode_cursor(cursor) if cursor else None
    # With a status filter at most this many jobs are looked at per request; the cursor continues the scan.
    scan = max(limit * 10, 200)
    page = streams.job_page(ctx.db, key.tenant_id, after=after, limit=limit, status=status, scan=scan)
    items: list[JobSummary] = []
    for row in page.jobs:
        snap = (row.state or {}).get("snapshot")
        job_status = snap.get("status") if isinstance(snap, dict) else None
        items.append(JobSummary(jobId=row.job_id, status=job_status, version=row.version,
                                headChainHash=row.head_chain_hash, updatedAt=str(row.updated_at), job=snap))
    next_cursor = _encode_cursor(page.last_seen) if page.more and page.last_seen else None
    return JobList(jobs=items, nextCursor=next_cursor)


def _encode_cursor(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode("utf-8")).decode("ascii").rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        value = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError("invalid cursor", code="CURSOR_INVALID", field="cursor") from exc
    if not value or "\x00" in value:
        raise ValidationError("invalid cursor", code="CURSOR_INVALID", field="cursor")
    return value


@router.get("/jobs/{job_id}", summary="A job's snapshot", responses=problems("JOB_NOT_FOUND"))
def get_job(job_id: TextIdPath, request: Request, key: ApiKey = require("jobs:read")) -> JobView:
    head, state = job_head(context(request), key.tenant_id, job_id)
    snap = state.get("snapshot") if isinstance(state, dict) else None
    return JobView(jobId=job_id, version=head.seq, headChainHash=head.chain_hash, job=snap)


@router.get("/jobs/{job_id}/events", summary="A job's events, optionally through a chain hash",
            responses=problems("JOB_NOT_FOUND", "ATCHAINHASH_NOT_FOUND"))
def get_events(job_id: TextIdPath, request: Request, key: ApiKey = require("jobs:read"),
               throughChainHash: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
               afterSeq: PositionQuery = 0) -> JobEvents:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    events = ctx.appender.streams.read_stream(key.tenant_id, job_id, through_chain_hash=throughChainHash,
                                           after_seq=afterSeq)
    return JobEvents(jobId=job_id, events=events)


@router.get("/jobs/{job_id}/export", summary="A job's stream in the offline verifier's format (JSON array)",
            responses={200: _ATTACHMENT, **problems("JOB_NOT_FOUND", "ATCHAINHASH_NOT_FOUND")})
def export_job(job_id: TextIdPath, request: Request, response: Response, key: ApiKey = require("jobs:read"),
               throughChainHash: Annotated[str | None, Query(min_length=1, max_length=128)] = None) -> EventExport:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    events = ctx.appender.streams.read_stream(key.tenant_id, job_id, through_chain_hash=throughChainHash)
    response.headers["Content-Disposition"] = content_disposition(f"{job_id}.json")
    return EventExport(events)
