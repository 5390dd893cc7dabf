"""The console's pages and actions (a Starlette app mounted at `/console` by `create_app(mounts=...)`).

Each page checks the scope of the JSON route that serves the same data and calls what that route calls, for the
signed-in key's tenant; each action needs its route's scope, a form from this origin with the session's CSRF
token, and is written to the `settlekit.console.audit` log. Ids travel in query strings and form fields (never in
the path), so any id a tenant chose reaches the service as it is. Every answer carries a strict
Content-Security-Policy (no inline script or style), and Jinja2 escapes every value it renders.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from settlekit.api.auth import ApiKey, authenticate
from settlekit.api.deps import MAX_INT64, ApiContext, check_scope, cursors_ready, job_head
from settlekit.api.ratelimit import RateLimitedError
from settlekit.api.responses import content_disposition
from settlekit.application import consumers as consumer_ops
from settlekit.application import destinations
from settlekit.application import finance as fin
from settlekit.application import jobs as streams
from settlekit.application import keys as api_keys
from settlekit.application import ledger as ledger_rows
from settlekit.application import ledger as timeline
from settlekit.application.destinations import replays
from settlekit.console import charts
from settlekit.console.session import CsrfError, Sessions, SignedIn, check_form, session_secret
from settlekit.cursors import DELIVERY, POSTINGS
from settlekit.errors import NotFoundError, SettlekitError, ValidationError
from settlekit.events.canonical import storable_json
from settlekit.events.envelope import VerificationError, load_public_key, verify_link
from settlekit.jobs.types import JOB_STATES
from settlekit.ledger.timeline import millis_to_iso, parse_instant
from settlekit.runtime.settings import Settings

PREFIX = "/console"
STATIC = Path(__file__).parent / "static"
PAGE = 50  # rows of a listing page
STATUS_SCAN = 100  # jobs looked at per page of a status filter (its "next page" goes on from the last one)
TIMELINE_ROWS = 500  # events a job page lists (every event is verified; the download holds them all)
OVERVIEW_DESTINATIONS = 20  # destinations charted on the overview (the deliveries page lists them all)
MAX_FORM_BYTES = 16_384
MAX_ID = 200  # ids in a query or a form are bounded as the API bounds them in a path
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
Form = Mapping[str, str]
SECURITY_HEADERS = {
    "content-security-policy": CSP, "x-content-type-options": "nosniff", "x-frame-options": "DENY",
    "referrer-policy": "same-origin", "cache-control": "no-store", "cross-origin-opener-policy": "same-origin",
}

audit = logging.getLogger("settlekit.console.audit")


class SignInRequired(Exception):
    """No valid session: the page answers with a redirect to the sign-in form."""


class _Headers:
    """ASGI wrapper: the security headers on every answer of the console (static files included)."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self.raw = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", ())}
                message = {**message, "headers": [*message.get("headers", ()),
                                                  *(h for h in self.raw if h[0] not in names)]}
            await send(message)

        await self.app(scope, receive, sending)


def console_app(ctx: ApiContext, settings: Settings) -> ASGIApp:
    """The console over the API's context `ctx`."""
    signer = ctx.appender.server_signer
    console = Console(ctx, Sessions(ctx.db, session_secret(signer.private_key_pem() if signer else None),
                                    settings.console_session_seconds, PREFIX))
    app = Starlette(routes=console.routes(), exception_handlers={
        SignInRequired: console.to_sign_in, SettlekitError: console.error_page})
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return _Headers(app)


def _env() -> Environment:
    env = Environment(loader=PackageLoader("settlekit.console", "templates"), autoescape=select_autoescape(
        default=True, default_for_string=True), trim_blocks=True, lstrip_blocks=True)
    env.filters["cents"] = _cents
    env.filters["short"] = _short
    env.filters["when"] = _when
    env.filters["pretty"] = _pretty
    env.globals["prefix"] = PREFIX
    return env


def _cents(value: Any) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return "" if value is None else str(value)
    sign = "-" if value < 0 else ""
    return f"{sign}{abs(value) // 100:,}.{abs(value) % 100:02d}"


def _short(value: Any, n: int = 16) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= n else f"{text[:n]}…"


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


def _pretty(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):  # imported history: nested past 255 levels, a lone surrogate
        return storable_json(value)


def _download(value: Any) -> bytes:
    """JSON of events or an artifact as stored: orjson where it can; a value nested past 255 levels or holding a
    lone surrogate (imported history) as the store writes it (any depth, the surrogate as its escape)."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return storable_json(value).encode("utf-8")


def _text(source: Any, name: str, *, required: bool = False, max_length: int = MAX_ID) -> str | None:
    """A query or form value: bounded, without U+0000 (SCHEMA_INVALID otherwise); '' is absent."""
    value = source.get(name)
    if not value:
        if required:
            raise ValidationError(f"{name} is required", code="SCHEMA_INVALID", field=name)
        return None
    if not isinstance(value, str) or len(value) > max_length or "\x00" in value:
        raise ValidationError(f"{name} must be 1..{max_length} characters", code="SCHEMA_INVALID", field=name)
    return value


def _instant(source: Any, name: str) -> datetime | None:
    """An instant from a form: ISO-8601 with an offset, or a datetime-local value (read as UTC)."""
    text = _text(source, name, max_length=64)
    if text is None:
        return None
    millis = parse_instant(text) or parse_instant(f"{text}Z")
    if millis is None:
        raise ValidationError(f"{name} must be a time such as 2026-01-31T23:59:59Z", code="SCHEMA_INVALID",
                              field=name)
    return datetime.fromtimestamp(millis / 1000, UTC)


class Console:
    def __init__(self, ctx: ApiContext, sessions: Sessions):
        self.ctx = ctx
        self.sessions = sessions
        self.env = _env()
        # a delivery's id as its tenant sees it (settlekit/cursors.py): the row id counts every tenant's deliveries
        self.env.filters["delivery_id"] = lambda d: ctx.cursors.encode(DELIVERY, d.tenant_id, d.id)

    def routes(self) -> list[Route]:
        page = self._page
        return [
            Route("/", page(self.overview, None)),  # each of its panels needs its own scope
            Route("/overview/panel", page(self.overview_panel, None)),
            Route("/login", self.sign_in_form, methods=["GET"]),
            Route("/login", self.sign_in, methods=["POST"]),
            Route("/logout", self.sign_out, methods=["POST"]),
            Route("/jobs", page(self.jobs, "jobs:read")),
            Route("/job", page(self.job, "jobs:read")),
            Route("/job/export", page(self.job_export, "jobs:read")),
            Route("/artifact", page(self.artifact, "jobs:read")),
            Route("/deliveries", page(self.destinations, "ops")),
            Route("/destination", page(self.destination, "ops")),
            Route("/delivery", page(self.delivery, "ops")),
            Route("/destination/{verb:str}", self._action(self.destination_action, "ops"), methods=["POST"]),
            Route("/delivery/requeue", self._action(self.delivery_requeue, "ops"), methods=["POST"]),
            Route("/dispatcher", page(self.dispatcher, "admin", operator=True)),
            Route("/dispatcher/{verb:str}", self._action(self.consumer_action, "admin", operator=True),
                  methods=["POST"]),
            Route("/ledger", page(self.ledger, "jobs:read")),
            Route("/ledger/account", page(self.account, "jobs:read")),
            Route("/finance", page(self.finance, "jobs:read")),
            Route("/finance/close", page(self.close, "jobs:read")),
            Route("/finance/journal.csv", page(self.journal, "jobs:read")),
            Route("/finance/gl-batch.json", page(self.gl_batch, "jobs:read")),
            Route("/finance/proof", page(self.proof, "jobs:read")),
        ]

    # --- sessions ------------------------------------------------------------------------------------------------

    def signed_in(self, request: Request) -> SignedIn:
        """The session's key, still active, after taking a token from its rate limit (SignInRequired without)."""
        session = self.sessions.read(request)
        if session is None:
            raise SignInRequired
        found = api_keys.find(self.ctx.db, session.key_id)
        if found is None or found.status != "active":
            raise SignInRequired
        quota = self.ctx.limiter.acquire(found.key_id)
        if quota is not None and quota.wait > 0:
            raise RateLimitedError("rate limit exceeded for this API key", quota)
        return SignedIn(ApiKey(found.key_id, found.tenant_id, found.scopes, found.status, found.label), session.csrf,
                        session.session_id, session.flash)

    def _page(self, view: Callable[[Request, SignedIn], Response], scope: str | None, *,
              operator: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            def run() -> Response:
                user = self.signed_in(request)
                if scope is not None:
                    check_scope(self.ctx, user.key, scope, operator=operator)
                return view(request, user)

            return await run_in_threadpool(run)

        return endpoint

    def _action(self, act: Callable[[Request, SignedIn, Form], Awaitable[Response]], scope: str, *,
                operator: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            form = await _form(request)
            user = await run_in_threadpool(self.signed_in, request)
            check_form(request, user, _text(form, "csrf", max_length=200))
            check_scope(self.ctx, user.key, scope, operator=operator)
            name = f"{request.url.path.removeprefix(PREFIX)}"
            target = {k: form.get(k) for k in ("id", "name", "since", "until") if form.get(k)}
            try:
                answer = await act(request, user, form)
            except SettlekitError as exc:
                _audit(user, name, target, exc.code)
                raise
            _audit(user, name, target, "ok")
            return answer

        return endpoint

    def render(self, request: Request, template: str, user: SignedIn | None, status_code: int = 200,
               **values: Any) -> HTMLResponse:
        flash = None
        if user is not None and user.flash is not None and template != "overview_panel.html" \
                and self.sessions.take_flash(user.session_id):  # shown once, by the first page that takes it
            flash = orjson.loads(user.flash)
        html = self.env.get_template(template).render(
            user=user, key=user.key if user else None, csrf=user.csrf if user else None, path=request.url.path,
            can=_scopes(self.ctx, user.key) if user else set(), flash=flash, **values)
        return HTMLResponse(html, status_code=status_code)

    async def to_sign_in(self, request: Request, exc: Exception) -> Response:
        if request.method == "GET" and request.url.path != f"{PREFIX}/overview/panel":
            return RedirectResponse(f"{PREFIX}/login", status_code=303)
        return HTMLResponse("sign in again", status_code=401)

    async def error_page(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SettlekitError)
        status = exc.status if 400 <= exc.status < 600 else 500
        headers = {"retry-after": str(int(exc.details.get("retryAfterSeconds", 1)))} if status == 429 else None
        response = self.render(request, "error.html", None, status_code=status, code=exc.code, message=exc.message)
        if headers:
            response.headers.update(headers)
        return response

    def sign_in_form(self, request: Request) -> Response:
        return self._sign_in_page(request, failed=False)

    def _sign_in_page(self, request: Request, *, failed: bool) -> Response:
        cookies = HTMLResponse("")
        token = self.sessions.sign_in_token(request, cookies)
        page = self.render(request, "login.html", None, status_code=401 if failed else 200, sign_in_csrf=token,
                           failed=failed)
        page.raw_headers.extend(h for h in cookies.raw_headers if h[0] == b"set-cookie")
        return page

    async def sign_in(self, request: Request) -> Response:
        form = await _form(request)
        self.sessions.check_sign_in(request, _text(form, "csrf", max_length=200))
        token = _text(form, "api_key", max_length=400)
        address = request.client.host if request.client else "unknown"
        if self.ctx.auth_failures.peek(address) > 0:
            raise SettlekitError("too many failed sign-ins from this address", code="RATE_LIMITED", status=429)
        try:
            key = await run_in_threadpool(authenticate, self.ctx.db, token)
        except SettlekitError:
            self.ctx.auth_failures.take(address)
            audit.info("console sign-in refused", extra={"client": address})
            return self._sign_in_page(request, failed=True)
        signed = RedirectResponse(f"{PREFIX}/", status_code=303)
        await run_in_threadpool(self.sessions.issue, signed, request, key)
        audit.info("console sign-in", extra={"tenant_id": key.tenant_id, "key_id": key.key_id})
        return signed

    async def sign_out(self, request: Request) -> Response:
        form = await _form(request)
        session = await run_in_threadpool(self.sessions.read, request)
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        if session is not None:
            check_form(request, SignedIn(ApiKey(session.key_id, "", frozenset()), session.csrf),
                       _text(form, "csrf", max_length=200))
            audit.info("console sign-out", extra={"key_id": session.key_id})
        await run_in_threadpool(self.sessions.end, response, session)
        return response

    # --- overview ------------------------------------------------------------------------------------------------

    def overview(self, request: Request, user: SignedIn) -> Response:
        return self.render(request, "overview.html", user, panel=self._overview_data(user))

    def overview_panel(self, request: Request, user: SignedIn) -> Response:
        return self.render(request, "overview_panel.html", user, panel=self._overview_data(user))

    def _overview_data(self, user: SignedIn) -> dict[str, Any]:
        tenant = user.key.tenant_id
        can = _scopes(self.ctx, user.key)
        out: dict[str, Any] = {"appends": self._append_rate(tenant, can), "last_close": None}
        if "jobs:read" in can:
            months = fin.closed_months(self.ctx.db, tenant)
            out["last_close"] = fin.get_close(self.ctx.db, tenant, months[-1]) if months else None
        if "ops" in can:
            rows = []
            for dest in destinations.list_destinations(self.ctx.db, tenant)[:50]:
                stats = destinations.destination_stats(self.ctx.db, tenant, dest.destination_id)
                rows.append((dest.destination_id, stats))
            out["destinations"] = rows
            out["success_chart"] = charts.bars(
                [(d, (s["successRate"] or 0.0) * 100) for d, s in rows], maximum=100, unit="%")
            out["dead_letters"] = sum(s["deliveries"]["failed"] for _, s in rows)
        if "dispatcher" in can:
            consumers = consumer_ops.list_consumers(self.ctx.db, self.ctx.registered_consumers)
            out["consumers"] = consumers
            out["lag_chart"] = charts.bars([(p.state.name, float(p.lag)) for p in consumers], unit=" events")
        return out

    def _append_rate(self, tenant: str, can: set[str]) -> dict[str, Any]:
        """Events appended in the last minute and hour, from the database (every API process appends to it): the
        tenant's own, and for the operator the whole deployment's with its per-minute chart; the mean append
        latency is this process's (its metrics)."""
        found = streams.append_rates(self.ctx.db, tenant, datetime.now(UTC), deployment="dispatcher" in can)
        minute, hour, rate = found.minute, found.hour, found.deployment
        return {"minute": minute, "hour": hour, "cap": streams.TENANT_APPEND_CAP, "mean_ms": self._append_latency_ms(),
                "deployment": rate, "chart": charts.line([float(n) for n in rate.per_minute], unit=" a minute",
                                      label="events appended per minute, the last hour") if rate else None}

    def _append_latency_ms(self) -> float | None:
        """The mean append latency in this process, from its append metrics."""
        total = seconds = 0.0
        registry = self.ctx.registry
        if registry is not None:
            for metric in registry.collect():
                if metric.name == "settlekit_append_duration_seconds":
                    for sample in metric.samples:
                        if sample.name.endswith("_count"):
                            total += sample.value
                        elif sample.name.endswith("_sum"):
                            seconds += sample.value
        return seconds / total * 1000 if total else None

    # --- jobs ----------------------------------------------------------------------------------------------------

    def jobs(self, request: Request, user: SignedIn) -> Response:
        q = request.query_params
        prefix = _text(q, "q")
        status = _text(q, "status", max_length=64)
        after = _text(q, "after")
        tenant = user.key.tenant_id
        if prefix:
            page = streams.job_prefix_page(self.ctx.db, tenant, prefix, after=after, limit=PAGE, status=status,
                                           scan=STATUS_SCAN)
        else:
            page = streams.job_page(self.ctx.db, tenant, after=after, limit=PAGE, status=status, scan=STATUS_SCAN)
        rows = []
        for row in page.jobs:
            found = row.state.get("snapshot") if isinstance(row.state, dict) else None
            snap: dict[str, Any] = found if isinstance(found, dict) else {}
            quote: dict[str, Any] = snap["quote"] if isinstance(snap.get("quote"), dict) else {}
            rows.append({"id": row.job_id, "status": snap.get("status"), "version": row.version,
                         "last_event": snap.get("lastEventId"), "updated": row.updated_at,
                         "amount": quote.get("amountCents"), "currency": quote.get("currency")})
        return self.render(request, "jobs.html", user, rows=rows, q=prefix or "", status=status or "",
                           states=JOB_STATES, next_after=page.last_seen if page.more else None)

    def job(self, request: Request, user: SignedIn) -> Response:
        job_id = _text(request.query_params, "id", required=True)
        assert job_id is not None
        tenant = user.key.tenant_id
        head, state = job_head(self.ctx, tenant, job_id)
        events = self.ctx.appender.streams.read_stream(tenant, job_id)
        timeline_rows = self._verified(tenant, events)
        with self.ctx.db.read() as tx:
            page = self.ctx.artifacts.list_for_job(tx, tenant, job_id, after=None, limit=500)
            sent = destinations.deliveries_of_artifacts(tx, tenant, [a.artifact_id for a in page.items])
        by_artifact: dict[str, list[Any]] = {}
        for d in sent:
            by_artifact.setdefault(d.artifact_id, []).append(d)
        can = _scopes(self.ctx, user.key)
        return self.render(
            request, "job.html", user, job_id=job_id, head=head, snapshot=(state or {}).get("snapshot"),
            events=timeline_rows[:TIMELINE_ROWS], hidden_events=max(0, len(timeline_rows) - TIMELINE_ROWS),
            verified=all(r["ok"] for r in timeline_rows),
            entries=ledger_rows.entries_for_job(self.ctx.db, tenant, job_id),
            allocations=ledger_rows.allocations_for_job(self.ctx.db, tenant, job_id),
            artifacts=page.items, deliveries=by_artifact if "ops" in can else None)

    def _verified(self, tenant: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The timeline: each event with whether its link, hashes and signature verify (as the offline verifier)."""
        ids = {str(e["signerKeyId"]) for e in events if isinstance(e.get("signerKeyId"), str)}
        keys = {k: s.public_key_pem for k, s in self.ctx.appender.signer_keys.find(tenant, ids).items()}
        signer = self.ctx.appender.server_signer
        if signer is not None:
            keys.setdefault(signer.key_id, signer.public_key_pem)
        loaded: dict[str, Any] = {}

        def lookup(key_id: str) -> Any:
            if key_id not in loaded:
                pem = keys.get(key_id)
                loaded[key_id] = load_public_key(pem) if pem else None
            return loaded[key_id]

        out = []
        prev = None
        for i, event in enumerate(events):
            problem = None
            try:
                verify_link(event, prev, i, lookup, node_base64=True)
            except (VerificationError, KeyError, TypeError, ValueError) as exc:
                problem = getattr(exc, "code", type(exc).__name__)
            prev = event.get("chainHash")
            actor: dict[str, Any] = event["actor"] if isinstance(event.get("actor"), dict) else {}
            out.append({"seq": i + 1, "type": event.get("type"), "at": event.get("at"), "id": event.get("id"),
                        "actor": f"{actor.get('type', '')}:{actor.get('id', '')}", "signer": event.get("signerKeyId"),
                        "chain": event.get("chainHash"), "ok": problem is None, "problem": problem,
                        "payload": event.get("payload")})
        return out

    def job_export(self, request: Request, user: SignedIn) -> Response:
        job_id = _text(request.query_params, "id", required=True)
        assert job_id is not None
        job_head(self.ctx, user.key.tenant_id, job_id)
        events = self.ctx.appender.streams.read_stream(user.key.tenant_id, job_id)
        return Response(_download(events), media_type="application/json",
                        headers={"content-disposition": content_disposition(f"{job_id}.json")})

    def artifact(self, request: Request, user: SignedIn) -> Response:
        artifact_id = _text(request.query_params, "id", required=True, max_length=500)
        assert artifact_id is not None
        with self.ctx.db.read() as tx:
            found = self.ctx.artifacts.get(tx, user.key.tenant_id, artifact_id)
        if found is None:
            raise NotFoundError(f"artifact {artifact_id} not found", code="ARTIFACT_NOT_FOUND")
        return Response(_download(found.artifact), media_type="application/json",
                        headers={"content-disposition": content_disposition(f"{artifact_id}.json")})

    # --- deliveries ----------------------------------------------------------------------------------------------

    def destinations(self, request: Request, user: SignedIn) -> Response:
        tenant = user.key.tenant_id
        rows = [(d, destinations.destination_stats(self.ctx.db, tenant, d.destination_id))
                for d in destinations.list_destinations(self.ctx.db, tenant)]
        chart = charts.bars([(d.destination_id, (s["successRate"] or 0.0) * 100) for d, s in rows], maximum=100,
                            unit="%")
        latency = charts.bars([(d.destination_id, s["latencyMs"]["p90"] or 0.0) for d, s in rows], unit=" ms")
        return self.render(request, "destinations.html", user, rows=rows, chart=chart, latency=latency)

    def destination(self, request: Request, user: SignedIn) -> Response:
        dest_id = _text(request.query_params, "id", required=True, max_length=64)
        assert dest_id is not None
        tenant = user.key.tenant_id
        dest = destinations.get_destination(self.ctx.db, tenant, dest_id)
        stats = destinations.destination_stats(self.ctx.db, tenant, dest_id)
        before = self._delivery_row(tenant, request.query_params, "before", not_found=False)
        with self.ctx.db.read() as tx:
            latest = destinations.latest_deliveries(tx, tenant, dest_id, before_id=before, limit=PAGE)
        now = datetime.now(UTC).replace(microsecond=0)
        return self.render(request, "destination.html", user, dest=dest, stats=stats, latest=latest,
                           replay_since=(now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S"),
                           replay_until=(now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S"),
                           replays=replays.list_for(self.ctx.db, tenant, dest_id),
                           next_before=latest[-1] if len(latest) == PAGE else None)

    def _delivery_row(self, tenant_id: str, source: Any, name: str, *, not_found: bool = True) -> int | None:
        """The row behind a delivery id of the tenant in `source[name]` (None when absent): a number is
        CURSOR_NUMERIC; another token NOT_FOUND (`not_found`) or CURSOR_INVALID."""
        token = _text(source, name, max_length=200)
        if token is None:
            return None
        if not_found and not (token.isascii() and token.isdigit()):
            found = self.ctx.cursors.values(DELIVERY, tenant_id, token)
            if found is None:
                raise NotFoundError("delivery not found", code="NOT_FOUND")
            return found[0]
        return self.ctx.cursors.decode(DELIVERY, tenant_id, token, field=name)[0]

    def delivery(self, request: Request, user: SignedIn) -> Response:
        delivery_id = self._delivery_row(user.key.tenant_id, request.query_params, "id")
        if delivery_id is None:
            raise ValidationError("id is required", code="SCHEMA_INVALID", field="id")
        detail = destinations.get_delivery(self.ctx.db, user.key.tenant_id, delivery_id)
        return self.render(request, "delivery.html", user, d=detail.delivery, attempts=detail.attempts)

    async def destination_action(self, request: Request, user: SignedIn, form: Form) -> Response:
        verb = request.path_params["verb"]
        dest_id = _text(form, "id", required=True, max_length=64)
        assert dest_id is not None
        tenant = user.key.tenant_id
        ctx = self.ctx
        actor = user.key.key_id
        if verb == "test":
            timeout = ctx.test_sends.timeout
            with ctx.test_sends.slot(tenant):
                sent = await destinations.send_test(ctx.db, tenant, dest_id, policy=ctx.destination_policy,
                                                sender=destinations.config_for_test_send(timeout))
            return await run_in_threadpool(lambda: self.done(request, user, "Test message sent", dest_id,
                                                             result=sent.to_json()))

        def act() -> Response:
            if verb == "replay":
                since = _instant(form, "since")
                if since is None:
                    raise ValidationError("since is required", code="SCHEMA_INVALID", field="since")
                now = datetime.now(UTC)
                start, end = destinations.window(since, _instant(form, "until"), now)
                with ctx.db.transaction() as tx:
                    row, pending = replays.create(tx, tenant, dest_id, since=start, until=end,
                                                  policy=ctx.replay_policy, actor=actor, now=now)
                return self.done(request, user, "Replay started", dest_id,
                                 result={**replays.to_json(row), "alreadyPending": pending})
            if verb == "requeue":
                with ctx.db.transaction() as tx:
                    n = destinations.requeue_destination(ctx.db, tenant, dest_id, actor=actor, tx=tx)
                return self.done(request, user, "Failed deliveries requeued", dest_id, result={"requeued": n})
            if verb == "disable":
                reason = _text(form, "reason", max_length=500) or "operator"
                destinations.disable_destination(ctx.db, tenant, dest_id, reason=reason, actor=actor,
                                             registry=ctx.registry)
                return self.done(request, user, "Destination disabled", dest_id, result={"reason": reason})
            if verb == "enable":
                with ctx.url_checks.slot(tenant):
                    _, report = destinations.enable_destination_with_backfill(
                        ctx.db, tenant, dest_id, policy=ctx.destination_policy, actor=actor,
                        backfill=form.get("backfill") == "on")
                return self.done(request, user, "Destination enabled", dest_id, result=report.to_json())
            if verb == "rotate-secret":
                secret = destinations.generate_secret()
                with ctx.url_checks.slot(tenant):
                    current = destinations.get_destination(ctx.db, tenant, dest_id)
                    destinations.save_destination(ctx.db, dataclasses.replace(current), policy=ctx.destination_policy,
                                              replace=True, actor=actor, secret_value=secret,
                                              rotation_grace=destinations.DEFAULT_ROTATION_GRACE,
                                              changes=lambda now: now)
                return self.done(request, user, "Secret rotated", dest_id, secret=secret,
                                 result={"previousSecretGraceSeconds":
                                         int(destinations.DEFAULT_ROTATION_GRACE.total_seconds())})
            raise NotFoundError(f"no action {verb!r}", code="NOT_FOUND")

        return await run_in_threadpool(act)

    async def delivery_requeue(self, request: Request, user: SignedIn, form: Form) -> Response:
        await cursors_ready(self.ctx)
        delivery_id = self._delivery_row(user.key.tenant_id, form, "id")
        if delivery_id is None:
            raise ValidationError("id is required", code="SCHEMA_INVALID", field="id")
        shown = _text(form, "id", max_length=200)

        def act() -> Response:
            with self.ctx.db.transaction() as tx:
                try:
                    destinations.requeue_delivery(self.ctx.db, user.key.tenant_id, delivery_id, actor=user.key.key_id,
                                              tx=tx)
                except SettlekitError as exc:
                    if "delivery_id" in exc.details:  # named as the tenant knows it
                        exc.details["delivery_id"] = shown
                    raise
            return self.done(request, user, "Delivery requeued", None, result={"deliveryId": shown},
                             back=f"{PREFIX}/delivery?id={shown}")

        return await run_in_threadpool(act)

    def done(self, request: Request, user: SignedIn, title: str, destination_id: str | None, *,
             result: dict[str, Any], secret: str | None = None, back: str | None = None) -> Response:
        """Post/redirect/get: the outcome goes into the session as a one-shot message and the answer is a redirect
        (303) to the page it concerns, which shows it once; reloading that page repeats nothing."""
        flash = {"title": title, "destination_id": destination_id, "result": result, "secret": secret}
        self.sessions.flash(user.session_id, orjson.dumps(flash).decode("utf-8"))
        if back is None:
            back = f"{PREFIX}/destination?id={quote(destination_id, safe='')}" if destination_id else f"{PREFIX}/"
        return RedirectResponse(back, status_code=303)

    # --- dispatcher ----------------------------------------------------------------------------------------------

    def dispatcher(self, request: Request, user: SignedIn) -> Response:
        consumers = consumer_ops.list_consumers(self.ctx.db, self.ctx.registered_consumers)
        now = time.time()
        rows = []
        for p in consumers:
            letters = (consumer_ops.dead_letters(self.ctx.db, p.state.name, p.state.instance_id)
                       if p.state.status != "never-run" else [])
            gaps = [(g, now - g.seen_at if g.seen_at else None) for g in p.state.pending_gaps]
            rows.append({"p": p, "state": p.state.to_json(), "gaps": gaps, "dead_letters": letters[-PAGE:]})
        return self.render(request, "dispatcher.html", user, rows=rows,
                           chart=charts.bars([(p.state.name, float(p.lag)) for p in consumers], unit=" events"))

    async def consumer_action(self, request: Request, user: SignedIn, form: Form) -> Response:
        verb = request.path_params["verb"]
        name = _text(form, "name", required=True)
        instance = _text(form, "instance") or consumer_ops.SHARED_INSTANCE
        assert name is not None
        db = self.ctx.db

        def act() -> Response:
            if verb == "rearm":
                state = consumer_ops.restart_consumer(db, name, instance)
                return self.done(request, user, "Consumer rearmed", None, result=state.to_json(),
                                 back=f"{PREFIX}/dispatcher")
            if verb == "skip":
                with db.transaction() as tx:
                    result = consumer_ops.skip_poison(db, name, instance, tx=tx)
                return self.done(request, user, "Blocking event skipped", None,
                                 result={"skippedPosition": result.skipped_position, **result.state.to_json()},
                                 back=f"{PREFIX}/dispatcher")
            raise NotFoundError(f"no action {verb!r}", code="NOT_FOUND")

        return await run_in_threadpool(act)

    # --- ledger and finance --------------------------------------------------------------------------------------

    def ledger(self, request: Request, user: SignedIn) -> Response:
        q = request.query_params
        tenant = user.key.tenant_id
        as_of = _text(q, "asOf", max_length=64)
        party = _text(q, "party")
        shown_as_of = None
        if as_of is not None:
            millis = parse_instant(as_of) or parse_instant(f"{as_of}Z")
            if millis is None:
                raise ValidationError("asOf must be an ISO-8601 instant, e.g. 2026-01-31T23:59:59Z",
                                      code="LEDGER_AS_OF_INVALID", field="asOf")
            shown_as_of = millis_to_iso(millis)
            values = timeline.balances_as_of(self.ctx.db, tenant, "t", millis, party_id=party or timeline.ACCOUNT)
        elif party is not None:
            values = timeline.balances_as_of(self.ctx.db, tenant, "p", MAX_INT64, party_id=party)
        else:
            values = ledger_rows.balances(self.ctx.db, tenant).get(tenant, {})
        chart = charts.bars([(k, float(abs(v)) / 100) for k, v in values.items()], unit="")
        return self.render(request, "ledger.html", user, balances=values, total=sum(values.values()),
                           as_of=as_of or "", shown_as_of=shown_as_of, party=party or "", chart=chart)

    def account(self, request: Request, user: SignedIn) -> Response:
        q = request.query_params
        tenant = user.key.tenant_id
        account_id = _text(q, "id", required=True)
        assert account_id is not None
        party = _text(q, "party")
        party_id = party or timeline.ACCOUNT
        if not timeline.account_known(self.ctx.db, tenant, account_id):
            raise NotFoundError(f"no ledger account {account_id!r}", code="LEDGER_ACCOUNT_NOT_FOUND")
        cursor = _text(q, "cursor", max_length=800)
        after = None
        listing = (account_id, party_id)
        if cursor:
            found = self.ctx.cursors.values(POSTINGS, tenant, cursor, count=3, listing=listing)
            if found is None:
                raise ValidationError("invalid cursor", code="CURSOR_INVALID", field="cursor")
            after = (found[0], found[1], found[2])
        page = timeline.account_postings(self.ctx.db, tenant, account_id, after=after, limit=PAGE, party_id=party_id)
        next_cursor = (self.ctx.cursors.encode(POSTINGS, tenant, *page.last_key, listing=listing)
                       if page.more and page.last_key else None)
        return self.render(request, "account.html", user, account_id=account_id, party=party or "",
                           postings=page.postings, next_cursor=next_cursor)

    def finance(self, request: Request, user: SignedIn) -> Response:
        tenant = user.key.tenant_id
        months = fin.closed_months(self.ctx.db, tenant)
        closes = [fin.get_close(self.ctx.db, tenant, m) for m in reversed(months[-24:])]
        return self.render(request, "finance.html", user, closes=closes)

    def close(self, request: Request, user: SignedIn) -> Response:
        month = self._month(request)
        doc = fin.get_close(self.ctx.db, user.key.tenant_id, month)
        return self.render(request, "close.html", user, month=month, doc=doc)

    def _month(self, request: Request) -> str:
        month = _text(request.query_params, "month", required=True, max_length=7)
        assert month is not None
        if len(month) != 7 or month[4] != "-" or not (month[:4] + month[5:]).isdigit() \
                or not 1 <= int(month[5:]) <= 12 or month[:4] == "0000":
            raise ValidationError("month must be YYYY-MM", code="SCHEMA_INVALID", field="month")
        return month

    def journal(self, request: Request, user: SignedIn) -> Response:
        month = self._month(request)
        doc = fin.get_close(self.ctx.db, user.key.tenant_id, month)
        return StreamingResponse(_iterate(fin.iter_journal(self.ctx.db, user.key.tenant_id, month)),
                                 media_type="text/csv; charset=utf-8",
                                 headers={"x-content-sha256": doc["journal"]["sha256"],
                                          "content-disposition": content_disposition(f"journal-{month}.csv")})

    def gl_batch(self, request: Request, user: SignedIn) -> Response:
        month = self._month(request)
        fin.check_gl_export(self.ctx.db, user.key.tenant_id, month)
        return StreamingResponse(_iterate(fin.iter_gl_batch(self.ctx.db, user.key.tenant_id, month)),
                                 media_type="application/json",
                                 headers={"content-disposition": content_disposition(f"gl-batch-{month}.json")})

    def proof(self, request: Request, user: SignedIn) -> Response:
        month = self._month(request)
        job_id = _text(request.query_params, "job", required=True)
        assert job_id is not None
        proof = fin.inclusion_proof(self.ctx.db, user.key.tenant_id, month, job_id)
        return self.render(request, "proof.html", user, month=month, job_id=job_id, proof=proof)


def _iterate(chunks: Iterator[bytes]) -> Iterator[bytes]:
    yield from chunks


async def _form(request: Request) -> dict[str, str]:
    """The posted form, bounded in size (413 beyond)."""
    declared = request.headers.get("content-length")
    if declared is None or not declared.isdigit() or int(declared) > MAX_FORM_BYTES:
        raise SettlekitError("the form is too large", code="PAYLOAD_TOO_LARGE", status=413)
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        raise CsrfError("forms are posted as application/x-www-form-urlencoded")
    body = await request.body()
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=32)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValidationError("the form is not valid", code="SCHEMA_INVALID") from exc
    form: dict[str, str] = {}
    for name, value in pairs:
        form.setdefault(name, value)
    return form


def _scopes(ctx: ApiContext, key: ApiKey) -> set[str]:
    """What the key may see in the navigation: scopes it holds, and `dispatcher` for an operator admin key."""
    out = {s for s in ("jobs:read", "jobs:write", "finance:write", "ops", "admin") if key.allows(s)}
    if key.allows("admin") and key.tenant_id == ctx.operator_tenant:
        out.add("dispatcher")
    return out


def _audit(user: SignedIn, action: str, target: dict[str, Any], outcome: str) -> None:
    audit.info("console action", extra={"tenant_id": user.key.tenant_id, "key_id": user.key.key_id,
                                        "action": action, "target": target, "outcome": outcome})
