"""settld's own clients against settlekit: the job routes of settld 0.1.0's API that its executor SDK
(`packages/executor-sdk`) and API SDK (`packages/api-sdk`) call, under `/compat/settld`.

A thin adapter over this API's append use case (`api.routes.jobs`: the same appender, rules, idempotency and
metrics): settld's paths, headers and answer shapes, nothing decided again here.

- `GET /jobs/{id}` answers `{job}`, `GET /jobs/{id}/events` `{events}`; `POST /jobs` (settld's body:
  `templateId`, `customerId`, `siteId`, `contractId`, `constraints`) appends JOB_CREATED as settld's server does
  (a `job_<uuid>` id, actor `system/proxy`) and answers 201 `{job}`; `POST /jobs/{id}/events` takes one event, a
  server draft (`x-proxy-expected-prev-chain-hash` required, 428 otherwise) or a client-finalized envelope (its
  `prevChainHash` is the precondition, the header is ignored), on an existing job only (404 otherwise), and
  answers 201 `{event, job, ledgerEntryId, ledgerEntryIds}` (200 when the same signed event was already stored).
- Credentials: this API's keys as `Authorization: Bearer sk_…`. `x-proxy-tenant-id` names the tenant as in settld
  (absent or blank: `tenant_default`) and must be the key's tenant: another tenant is 403 `forbidden`, as settld
  answers a key it does not know in the tenant named. `x-idempotency-key` (or `Idempotency-Key`) makes a write
  idempotent; a replay answers the first answer's status and body.
- Errors in settld's shape: `{"error": <settld's message>, "code", "details"}` with settld's status
  (`SettldErrors`, which rewrites every problem+json answer under the prefix, the middleware's refusals
  included): e.g. 409 `event append conflict` with `{expectedPrevChainHash, gotPrevChainHash}` (the executor SDK
  rebases on exactly that message), 428 `missing precondition`, 404 `job not found`, 403 `forbidden`, 409
  `idempotency key conflict`. Where settld's code would be `UNKNOWN` the answer carries settlekit's code.

The answers are typed (`api/settld_compat_schemas.py`), rendered by `TypedRoute` as every other route's: the job's
snapshot and the events exactly as the append made them or the store read them.

settld's API SDK resolves its paths against the origin (`new URL("/jobs", baseUrl)` drops a base path), so it
cannot reach a prefix: with `settld_compat_at_root` the same routes answer at `/jobs…` of the origin as well
(settlekit's own routes are all under `/v1`).

The routes are a sub-application mounted at the prefix, not in the OpenAPI document (`/openapi.json` describes
settlekit's own API; these answer in another error shape on purpose). README: "settld's own clients".
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from settlekit.api.auth import ApiKey, ForbiddenError
from settlekit.api.deps import (
    ApiContext,
    TextIdPath,
    context,
    idempotency_key,
    job_head,
    job_not_found,
    require,
    require_scopes,
)
from settlekit.api.guards import parse_body
from settlekit.api.problems import (
    PROBLEM_TYPE,
    http_error_handler,
    settlekit_error_handler,
    unhandled_error_handler,
    validation_error_handler,
)
from settlekit.api.responses import TypedRoute, dumps
from settlekit.api.routes.jobs import APPEND_CODES, FINALIZED_KEYS, append_with_key, is_finance_type, measured_append
from settlekit.api.settld_compat_schemas import SettldAppended, SettldEvents, SettldJob
from settlekit.application import ledger as ledger_rows
from settlekit.application.jobs import AppendResult, StreamHead
from settlekit.errors import ConflictError, SettlekitError, ValidationError
from settlekit.events.js import js_trim
from settlekit.jobs.reducer import DEFAULT_TENANT_ID

PREFIX = "/compat/settld"
ROOT_PATHS = ("/jobs",)  # what `settld_compat_at_root` serves at the origin too (with what lies under it)
TENANT_HEADER = "x-proxy-tenant-id"
EXPECTED_HEADER = "x-proxy-expected-prev-chain-hash"
SERVER_ACTOR = {"type": "system", "id": "proxy"}  # the actor of the JOB_CREATED settld's POST /jobs writes
MAX_TENANT_LENGTH = 200
# settld's answers name the protocol versions its server speaks (the API SDK's `x-settld-protocol: 1.0`)
PROTOCOL_HEADERS = ((b"x-settld-protocol", b"1.0"), (b"x-settld-supported-protocols", b"1.0"))

router = APIRouter(route_class=TypedRoute)


# --- the routes ---------------------------------------------------------------------------------------------------

def _own_tenant(scope: str) -> Any:
    """Dependency: the request's key holding `scope`, whose tenant is the one `x-proxy-tenant-id` names."""

    async def dependency(request: Request, key: ApiKey = require(scope)) -> ApiKey:
        raw = request.headers.get(TENANT_HEADER)
        tenant = js_trim(raw) if raw is not None else ""
        if "\n" in tenant or "\r" in tenant or len(tenant) > MAX_TENANT_LENGTH:
            raise ValidationError("invalid tenant", code="SCHEMA_INVALID", field=TENANT_HEADER,
                                  reason="tenantId must be at most 200 characters without newlines")
        if (tenant or DEFAULT_TENANT_ID) != key.tenant_id:
            raise ForbiddenError(f"{TENANT_HEADER} names a tenant this API key does not belong to",
                                 code="FORBIDDEN")
        return key

    return Depends(dependency)


@router.get("/jobs/{job_id}")
def get_job(job_id: TextIdPath, request: Request, key: ApiKey = _own_tenant("jobs:read")) -> SettldJob:
    _, state = job_head(context(request), key.tenant_id, job_id)
    return SettldJob(job=_snapshot(state))


@router.get("/jobs/{job_id}/events")
def get_events(job_id: TextIdPath, request: Request, key: ApiKey = _own_tenant("jobs:read")) -> SettldEvents:
    ctx = context(request)
    job_head(ctx, key.tenant_id, job_id)
    return SettldEvents(events=ctx.appender.streams.read_stream(key.tenant_id, job_id))


@router.post("/jobs", status_code=201)
async def create_job(request: Request, response: Response, key: ApiKey = _own_tenant("jobs:write")) -> SettldJob:
    ctx = context(request)
    body = _body(await request.body())

    async def answer(result: AppendResult) -> SettldJob:
        return _job_answer(result, response)

    return await measured_append(ctx, _create_job(ctx, request, key, body), answer)


async def _create_job(ctx: ApiContext, request: Request, key: ApiKey, body: Any) -> AppendResult:
    fields = body if isinstance(body, dict) else {}
    template = fields.get("templateId")
    if template is None or template in ("", 0, False):  # JavaScript's falsy values a JSON body can hold
        raise ValidationError("templateId is required", code="SCHEMA_INVALID", field="templateId")
    constraints = fields.get("constraints")
    payload = {"tenantId": key.tenant_id, "customerId": fields.get("customerId"), "siteId": fields.get("siteId"),
               "contractId": fields.get("contractId"), "templateId": template,
               "constraints": constraints if constraints is not None else {}}
    draft = {"type": "JOB_CREATED", "actor": dict(SERVER_ACTOR), "payload": payload}
    return await append_with_key(ctx, key, request, f"job_{uuid.uuid4()}", [draft], None, idempotency_key(request),
                                 body, expected_given=True)


@router.post("/jobs/{job_id}/events", status_code=201)
async def append_event(job_id: TextIdPath, request: Request, response: Response,
                       key: ApiKey = _own_tenant("jobs:write")) -> SettldAppended:
    ctx = context(request)
    body = _body(await request.body())

    async def answer(result: AppendResult) -> SettldAppended:
        return await _event_answer(ctx, key, result, response)

    return await measured_append(ctx, _append_event(ctx, job_id, request, key, body), answer)


async def _append_event(ctx: ApiContext, job_id: str, request: Request, key: ApiKey, body: Any) -> AppendResult:
    if not isinstance(body, dict) or body.get("type") in (None, "", 0, False):
        raise ValidationError("type is required", code="SCHEMA_INVALID", field="type")
    if is_finance_type(body["type"]):
        require_scopes(key, ["finance:write"])
    finalized = any(k in body for k in FINALIZED_KEYS)
    expected: str | None = None
    given = False
    raw = request.headers.get(EXPECTED_HEADER)
    if raw is not None and not finalized:  # a finalized event names its head itself; settld ignores the header
        given = True
        value = raw.strip()
        expected = None if value in ("", "null") else value
    try:
        return await append_with_key(ctx, key, request, job_id, [body], expected, idempotency_key(request), body,
                                     expected_given=given, precondition=_existing_job(job_id), finalized=finalized)
    except ConflictError as exc:
        if exc.code != "PREV_CHAIN_HASH_MISMATCH":
            raise
        # settld's details: the stream's head, and what the event (or the draft's header) named
        got = "gotPrevChainHash" if finalized else "gotExpectedPrevChainHash"
        raise ConflictError(exc.message, code=exc.code, expectedPrevChainHash=exc.details.get("currentPrevChainHash"),
                            **{got: exc.details.get("expectedPrevChainHash")}) from None
    except SettlekitError as exc:
        said = _CHAIN_SENTENCES.get(exc.code)
        if said is None:
            raise
        # settld's details of a chain failure: a sentence naming the event's index in the whole stream
        head, _ = await run_in_threadpool(ctx.appender.streams.head_and_snapshot, key.tenant_id, job_id)
        raise SettlekitError(exc.message, code=exc.code, status=exc.status,
                             settldDetails=f"{said} at index {head.seq if head is not None else 0}") from None


def _existing_job(job_id: str) -> Any:
    """settld appends to a job that exists only (JOB_CREATED comes from POST /jobs): 404 otherwise."""

    def check(head: StreamHead | None) -> None:
        if head is None or head.stream_type != "job":
            raise job_not_found(job_id)

    return check


def _body(raw: bytes) -> Any:
    """The body as settld reads it; an empty one is null (settld's routes then say what is missing)."""
    return None if not js_trim(raw.decode("utf-8", errors="replace")) else parse_body(raw)


def _snapshot(state: Any) -> Any:
    return state.get("snapshot") if isinstance(state, dict) else None


def _answer_status(result: AppendResult, response: Response) -> None:
    """201 (the route's) when the append added events; 200 when they were already stored."""
    if result.already_exists:
        response.status_code = 200


def _job_answer(result: AppendResult, response: Response) -> SettldJob:
    _answer_status(result, response)
    return SettldJob(job=_snapshot(result.snapshot))


async def _event_answer(ctx: ApiContext, key: ApiKey, result: AppendResult, response: Response) -> SettldAppended:
    event = result.events[-1]
    entry_ids = await run_in_threadpool(ledger_rows.entry_ids_for_event, ctx.db, key.tenant_id, result.stream_id,
                                        event["id"])
    _answer_status(result, response)
    return SettldAppended(event=event, job=_snapshot(result.snapshot),
                          ledgerEntryId=entry_ids[0] if entry_ids else None, ledgerEntryIds=entry_ids)


def compat_app(ctx: ApiContext) -> FastAPI:
    """The routes as an application of their own (mounted at PREFIX), on the API's context; its errors are
    problem+json as everywhere, which `SettldErrors` turns into settld's shape."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None, redirect_slashes=False)
    app.state.settlekit = ctx
    app.add_exception_handler(SettlekitError, settlekit_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(Exception, unhandled_error_handler)
    app.include_router(router)
    return app


# --- settld's error shape -----------------------------------------------------------------------------------------

# settlekit code -> (settld's status, settld's message, settld's code; None: settlekit's)
_CHAIN = "event chain verification failed"
# what settld's chain check says of the failure, by settlekit's code
_CHAIN_SENTENCES = {"CHAIN_BREAK": "prevChainHash mismatch", "PAYLOAD_HASH_MISMATCH": "payloadHash mismatch",
                    "CHAIN_HASH_MISMATCH": "chainHash mismatch", "SIGNER_KEY_ID_REQUIRED": "missing signerKeyId",
                    "SIGNER_UNKNOWN": "unknown signerKeyId", "SIG_INVALID": "signature invalid"}
_POLICY = "signature policy rejected"
_ENVELOPE = "invalid event envelope"
_SETTLD_ERRORS: dict[str, tuple[int, str, str | None]] = {
    "JOB_NOT_FOUND": (404, "job not found", "NOT_FOUND"),
    "NOT_FOUND": (404, "not found", "NOT_FOUND"),
    "PREV_CHAIN_HASH_MISMATCH": (409, "event append conflict", None),
    "VERSION_CONFLICT": (409, "event append conflict", None),
    "IDEMPOTENCY_CONFLICT": (409, "idempotency key conflict", "IDEMPOTENCY_CONFLICT"),
    "PRECONDITION_REQUIRED": (428, "missing precondition", "MISSING_PRECONDITION"),
    "PAYLOAD_TOO_LARGE": (413, "request body too large", "BODY_TOO_LARGE"),
    "RATE_LIMITED": (429, "rate limit exceeded", "RATE_LIMITED"),
    "JSON_INVALID": (400, "invalid JSON body", "SCHEMA_INVALID"),
    "FUTURE_TIMESTAMP": (400, "event.at is too far in the future", "FUTURE_TIMESTAMP"),
    "CHAIN_BREAK": (400, _CHAIN, "CHAIN_BREAK"),
    "PAYLOAD_HASH_MISMATCH": (400, _CHAIN, "CHAIN_BREAK"),
    "CHAIN_HASH_MISMATCH": (400, _CHAIN, "CHAIN_BREAK"),
    "SIGNER_KEY_ID_REQUIRED": (400, _CHAIN, "CHAIN_BREAK"),
    "SIG_INVALID": (400, _CHAIN, "SIG_INVALID"),
    "SIGNER_UNKNOWN": (400, _CHAIN, "SIGNER_UNKNOWN"),
    "SIGNER_KEY_NOT_ACTIVE": (400, _POLICY, "SIGNER_REVOKED"),
    "SIGNER_KEY_PURPOSE_MISMATCH": (400, _POLICY, "SIGNER_PURPOSE_MISMATCH"),
    "SIGNER_POLICY_VIOLATION": (400, _POLICY, "SIGNATURE_POLICY"),
    "INVALID_TRANSITION": (400, "job transition rejected", "TRANSITION_ILLEGAL"),
    "ENVELOPE_VERSION_UNSUPPORTED": (400, _ENVELOPE, "SCHEMA_INVALID"),
    "STREAM_MISMATCH": (400, _ENVELOPE, "SCHEMA_INVALID"),
    "LEDGER_POSTING_INVALID": (400, "ledger posting rejected", None),
    "INTERNAL": (500, "internal error", None),
}
# settld's own details of a refusal, where it gives a sentence
_LEFT_OUT: Any = object()  # settld's body has no `details` at all
_SETTLD_DETAILS: dict[str, Any] = {
    "IDEMPOTENCY_CONFLICT": "request differs from initial use of this key",
    "PRECONDITION_REQUIRED": f"{EXPECTED_HEADER} is required", "JOB_NOT_FOUND": _LEFT_OUT, "NOT_FOUND": _LEFT_OUT,
    "PAYLOAD_TOO_LARGE": _LEFT_OUT, "JSON_INVALID": _LEFT_OUT, "RATE_LIMITED": None}
# messages settld gives as they are (the route's own), by code
_OWN_MESSAGES = {"templateId is required", "type is required"}


def settld_error(status: int, code: str, message: str, details: Any = None, *, append: bool = False
                 ) -> tuple[int, dict[str, Any]]:
    """settld's status and body `{error, code, details}` (`details` left out where settld leaves it out) for a
    refusal settlekit answers with `status`, `code`,
    `message` and `details` (its problem's); `append`: the request was a write of an event (POST)."""
    if status in (401, 403):  # settld: any key it cannot use for the tenant, or a missing scope
        return 403, {"error": "forbidden", "code": "FORBIDDEN", "details": None}
    if code == "PREV_CHAIN_HASH_MISMATCH":  # the route named the details as settld does
        return 409, {"error": "event append conflict", "code": code, "details": details}
    known = _SETTLD_ERRORS.get(code)
    extra = details if isinstance(details, dict) else {}
    if known is not None:
        settld_status, error, settld_code = known
        body: dict[str, Any] = {"error": error, "code": settld_code or code}
        if "settldDetails" in extra:  # the route said it as settld does
            body["details"] = extra["settldDetails"]
        elif code not in _SETTLD_DETAILS:
            body["details"] = {"message": message, **extra}
        elif _SETTLD_DETAILS[code] is not _LEFT_OUT:
            body["details"] = _SETTLD_DETAILS[code]
        return settld_status, body
    if message in _OWN_MESSAGES:  # what settld's route says in so many words, without details
        return status, {"error": message, "code": code}
    if message == "invalid tenant":
        return status, {"error": message, "code": code, "details": {"message": extra.get("reason")}}
    if append and status == 400 and code == "SCHEMA_INVALID":
        return 400, {"error": _ENVELOPE, "code": code, "details": {"message": message, **extra}}
    if append and status == 400 and code in APPEND_CODES:
        # the job's rules and the payload checks: settld's validators refuse with "event rejected"
        return 400, {"error": "event rejected", "code": code, "details": {"message": message, **extra}}
    return status, {"error": message, "code": code, "details": extra or None}


class SettldErrors:
    """Pure ASGI, outermost: requests under PREFIX (and, with `at_root`, settld's paths at the origin, moved under
    PREFIX) have every problem+json answer rewritten into settld's error shape (`settld_error`), whoever answered:
    the API middleware (authentication, rate limit, body limit, overload) or a route."""

    def __init__(self, app: ASGIApp, *, at_root: bool = False):
        self.app = app
        self.at_root = at_root

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if self.at_root and any(path == p or path.startswith(f"{p}/") for p in ROOT_PATHS):
            scope = {**scope, "path": PREFIX + path}
            if isinstance(scope.get("raw_path"), bytes):
                scope["raw_path"] = PREFIX.encode() + scope["raw_path"]
        elif not (path == PREFIX or path.startswith(f"{PREFIX}/")):
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _rewriting(send, append=scope["method"] == "POST"))


def _rewriting(send: Send, *, append: bool) -> Send:
    """`send`, adding settld's protocol headers, and holding a problem+json answer until its body is whole to send
    settld's shape instead."""
    held: Message | None = None
    chunks: list[bytes] = []

    async def sending(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *PROTOCOL_HEADERS]}
            content_type = next((v for k, v in message["headers"] if k.lower() == b"content-type"), b"")
            if content_type.startswith(PROBLEM_TYPE.encode()):
                held = message
                return
        elif held is not None and message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            start, held = held, None
            await _send_settld_error(send, start, b"".join(chunks), append=append)
            return
        await send(message)

    return sending


async def _send_settld_error(send: Send, start: Message, problem: bytes, *, append: bool) -> None:
    try:
        parsed = orjson.loads(problem)
    except orjson.JSONDecodeError:
        parsed = {}
    parsed = parsed if isinstance(parsed, dict) else {}
    status, body = settld_error(int(start["status"]), str(parsed.get("code", "INTERNAL")),
                                str(parsed.get("detail", "")), parsed.get("details"), append=append)
    payload = dumps(body)
    dropped = (b"content-type", b"content-length", b"www-authenticate")
    headers = [(k, v) for k, v in start.get("headers", ()) if k.lower() not in dropped]
    headers += [(b"content-type", b"application/json; charset=utf-8"), (b"content-length", str(len(payload)).encode())]
    await send({**start, "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})
