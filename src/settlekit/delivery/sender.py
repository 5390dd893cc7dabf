"""Async webhook sender: posts prepared requests and reports structured outcomes; never decides retries.

One `httpx.AsyncClient` (keep-alive pool, timeouts, limits) per SSRF policy — in practice one per process,
since destinations rarely differ in policy. Connections go through `GuardedBackend`, so every new connection
is resolved, vetted and pinned; redirects are not followed and environment proxies are ignored.

The delivery worker calls `send_batch(requests)`: requests sharing a `group` (the scope key) run sequentially
in list order, groups run concurrently on at most `concurrency` worker tasks.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import importlib.util
import ssl
import sys
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpcore
import httpx

from settlekit import __version__
from settlekit.delivery.errors import DestinationForbiddenError
from settlekit.delivery.message import PreparedRequest
from settlekit.delivery.retry import EXCEPTION, NETWORK_ERROR, SSRF_BLOCKED, TIMEOUT, parse_retry_after
from settlekit.delivery.ssrf import AsyncResolver, GuardedBackend, SsrfPolicy, check_url

if importlib.util.find_spec("sniffio") is None:
    # httpcore retries `import sniffio` on every request; without the package each miss searches sys.path
    # (about a third of the sender's CPU). Recording the miss makes the retry fail fast, as before.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SenderConfig:
    timeout: float = 15.0  # whole attempt, connect to last response byte
    connect_timeout: float = 5.0
    max_connections: int = 100
    max_keepalive_connections: int = 20
    keepalive_expiry: float = 30.0
    concurrency: int = 16
    snippet_bytes: int = 512
    max_response_bytes: int = 65536  # read (and discard) up to this much so the connection can be reused
    user_agent: str = f"settlekit-webhooks/{__version__}"
    verify: ssl.SSLContext | bool = True


@dataclass(frozen=True)
class Outcome:
    """Result of one attempt. `error` is a spec 06 §5 reason (timeout, network_error, ssrf_blocked, exception)
    when no HTTP status was received; `status` is set whenever a response arrived."""

    tag: Any
    status: int | None
    error: str | None
    error_message: str | None
    retry_after: float | None
    duration_ms: float
    started_at: datetime
    response_snippet: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class _GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx transport whose connection pool connects through GuardedBackend."""

    def __init__(self, policy: SsrfPolicy, config: SenderConfig, resolver: AsyncResolver | None):
        super().__init__(verify=config.verify, trust_env=False)
        ctx = (
            config.verify
            if isinstance(config.verify, ssl.SSLContext)
            else httpx.create_ssl_context(verify=config.verify, trust_env=False)
        )
        # replace the default pool by an identical one with the guarded network backend
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ctx,
            max_connections=config.max_connections,
            max_keepalive_connections=config.max_keepalive_connections,
            keepalive_expiry=config.keepalive_expiry,
            network_backend=GuardedBackend(policy, resolver=resolver),
        )


class _NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps nothing: a receiver's Set-Cookie must not reach the next delivery, whichever
    tenant's it is (the clients are shared by every destination of a network policy)."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None


class WebhookSender:
    """Use as `async with WebhookSender(config) as sender: outcomes = await sender.send_batch(requests)`."""

    def __init__(self, config: SenderConfig | None = None, *, resolver: AsyncResolver | None = None):
        self.config = config or SenderConfig()
        self._resolver = resolver
        self._clients: dict[SsrfPolicy, httpx.AsyncClient] = {}
        self._closed = False

    async def __aenter__(self) -> WebhookSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.aclose()

    def _client(self, policy: SsrfPolicy) -> httpx.AsyncClient:
        client = self._clients.get(policy)
        if client is None:
            if self._closed:
                raise RuntimeError("sender is closed")
            cfg = self.config
            client = httpx.AsyncClient(
                transport=_GuardedTransport(policy, cfg, self._resolver),
                cookies=_NoCookies(),
                timeout=httpx.Timeout(cfg.timeout, connect=min(cfg.connect_timeout, cfg.timeout)),
                follow_redirects=False,
                trust_env=False,
                headers={"user-agent": cfg.user_agent},
            )
            self._clients[policy] = client
        return client

    async def send(self, req: PreparedRequest) -> Outcome:
        """POST one request; every failure becomes an Outcome (cancellation propagates)."""
        cfg = self.config
        total = req.timeout if req.timeout is not None else cfg.timeout
        started_at = datetime.now(UTC)
        t0 = time.monotonic()
        status: int | None = None
        error: str | None = None
        message: str | None = None
        retry_after: float | None = None
        snippet: str | None = None
        details: dict[str, Any] = {}
        try:
            check_url(req.url, req.policy)
            client = self._client(req.policy)
            timeout = httpx.Timeout(total, connect=min(cfg.connect_timeout, total))
            async with asyncio.timeout(total):
                async with client.stream(
                    "POST", req.url, content=req.body, headers=dict(req.headers), timeout=timeout
                ) as resp:
                    status = resp.status_code
                    retry_after = parse_retry_after(resp.headers.get("retry-after"))
                    snippet = await _read_snippet(resp, cfg.snippet_bytes, cfg.max_response_bytes)
        except DestinationForbiddenError as exc:
            error, message, details = SSRF_BLOCKED, exc.message, dict(exc.details)
        except (httpx.TimeoutException, TimeoutError) as exc:
            error, message = TIMEOUT, _describe(exc) or f"no complete response within {total:g}s"
        except httpx.TransportError as exc:
            error, message = NETWORK_ERROR, _describe(exc)
        except Exception as exc:  # recorded on the delivery as reason `exception`, with its type
            error, message = EXCEPTION, _describe(exc)
        if error is not None:
            status = None
        return Outcome(
            tag=req.tag,
            status=status,
            error=error,
            error_message=message,
            retry_after=retry_after if error is None else None,
            duration_ms=(time.monotonic() - t0) * 1000.0,
            started_at=started_at,
            response_snippet=snippet,
            details=details,
        )

    async def send_batch(
        self,
        requests: Sequence[PreparedRequest],
        *,
        should_stop: Callable[[], bool] | None = None,
        should_skip: Callable[[PreparedRequest], bool] | None = None,
        on_outcome: Callable[[Outcome, PreparedRequest], None] | None = None,
    ) -> list[Outcome]:
        """Send all requests; outcomes come back in input order.

        With `should_stop`, no request starts once it returns True (requests in flight finish); with
        `should_skip`, a request for which it returns True is not started. Requests never started have no
        outcome in the result. `on_outcome` sees each outcome as soon as it arrives."""
        results: list[Outcome | None] = [None] * len(requests)
        groups: dict[Hashable, list[int]] = {}
        for i, req in enumerate(requests):
            key = ("__single__", i) if req.group is None else ("group", req.group)
            groups.setdefault(key, []).append(i)
        queue: asyncio.Queue[list[int]] = asyncio.Queue()
        for idxs in groups.values():
            queue.put_nowait(idxs)

        async def worker() -> None:
            while True:
                try:
                    idxs = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                for i in idxs:
                    if should_stop is not None and should_stop():
                        return
                    if should_skip is not None and should_skip(requests[i]):
                        continue
                    outcome = results[i] = await self.send(requests[i])
                    if on_outcome is not None:
                        on_outcome(outcome, requests[i])

        n = max(1, min(self.config.concurrency, len(groups)))
        async with asyncio.TaskGroup() as tg:
            for _ in range(n):
                tg.create_task(worker())
        return [r for r in results if r is not None]


async def _read_snippet(resp: httpx.Response, snippet_bytes: int, max_bytes: int) -> str:
    buf = bytearray()
    async for chunk in resp.aiter_raw():
        if len(buf) < snippet_bytes:
            buf.extend(chunk[: snippet_bytes - len(buf)])
        max_bytes -= len(chunk)
        if max_bytes <= 0:
            break  # leaving the body unread closes this connection instead of returning it to the pool
    return bytes(buf).decode("utf-8", "replace")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
