"""Async webhook sender: posts prepared requests and reports structured outcomes; never decides retries.

One `httpx.AsyncClient` (keep-alive pool, timeouts, limits) per destination (its origin and SSRF policy). Connections go
through `GuardedBackend`, so every new connection is resolved, vetted and pinned; redirects are not followed and
environment proxies are ignored. Every attempt has one deadline, connect to last byte read, and reads at most
`max_response_bytes` of the answer.

The delivery worker calls `send(request)` for each delivery as its slot allows (`delivery.worker`);
`send_batch(requests)` sends a list: requests sharing a `group` run sequentially in list order, groups run
concurrently on at most `concurrency` tasks (the CLI and tests).
"""

from __future__ import annotations

import asyncio
import importlib.util
import ssl
import sys
import time
from collections import Counter, OrderedDict
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


class WebhookSender:
    """Use as `async with WebhookSender(config) as sender: outcomes = await sender.send_batch(requests)`.

    Requests go straight to httpcore's connection pools (httpx's client layer, with its cookies, redirects and
    header merging, cost more than the request itself): one keep-alive pool per request `pool` (the worker's: one
    per destination), origin (scheme, host, port) and SSRF policy, since httpcore looks at every connection of a
    pool each time it assigns a request. At most `MAX_POOLS` pools are kept; beyond that the least recently used
    idle one is closed. Nothing is kept between requests but connections: no cookies, no redirects followed, no
    proxies from the environment."""

    MAX_POOLS = 512

    def __init__(self, config: SenderConfig | None = None, *, resolver: AsyncResolver | None = None):
        self.config = config or SenderConfig()
        self._resolver = resolver
        self._pools: OrderedDict[tuple[SsrfPolicy, Hashable], httpcore.AsyncConnectionPool] = OrderedDict()
        self._in_use: Counter[tuple[SsrfPolicy, Hashable]] = Counter()
        self._last_used: dict[tuple[SsrfPolicy, Hashable], float] = {}
        self._swept = time.monotonic()
        self._closing: set[asyncio.Future[None]] = set()  # evicted pools being closed
        self._user_agent = self.config.user_agent.encode("latin-1")
        self._closed = False

    async def __aenter__(self) -> WebhookSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            await pool.aclose()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _pool(self, policy: SsrfPolicy, url: httpx.URL, pool: Hashable | None
              ) -> tuple[tuple[SsrfPolicy, Hashable], httpcore.AsyncConnectionPool]:
        key = (policy, (pool, url.scheme, url.netloc))
        now = time.monotonic()
        self._sweep(now)
        self._last_used[key] = now
        found = self._pools.get(key)
        if found is not None:
            self._pools.move_to_end(key)
            return key, found
        if self._closed:
            raise RuntimeError("sender is closed")
        cfg = self.config
        created = httpcore.AsyncConnectionPool(
            ssl_context=_ssl_context(cfg.verify) if url.scheme == "https" else None,
            max_connections=cfg.max_connections,
            max_keepalive_connections=cfg.max_keepalive_connections,
            keepalive_expiry=cfg.keepalive_expiry,
            network_backend=GuardedBackend(policy, resolver=self._resolver),
        )
        self._pools[key] = created
        if len(self._pools) > self.MAX_POOLS:
            idle = next((k for k in self._pools if not self._in_use[k] and k != key), None)
            if idle is not None:
                self._close_pool(idle)
        return key, created

    def _sweep(self, now: float) -> None:
        """Close the pools unused for longer than the keep-alive expiry (httpcore drops an expired connection only
        when its pool is used again), at most once per expiry interval."""
        if now - self._swept < self.config.keepalive_expiry:
            return
        self._swept = now
        for key in [k for k, used in self._last_used.items()
                    if now - used > self.config.keepalive_expiry and not self._in_use[k]]:
            self._close_pool(key)

    def _close_pool(self, key: tuple[SsrfPolicy, Hashable]) -> None:
        self._last_used.pop(key, None)
        self._in_use.pop(key, None)
        old = self._pools.pop(key, None)
        if old is not None:
            task = asyncio.ensure_future(old.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

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
            url = httpx.URL(req.url)
            key, pool = self._pool(req.policy, url, req.pool)
            headers = [(b"host", url.netloc), (b"user-agent", self._user_agent),
                       (b"content-length", str(len(req.body)).encode())]
            headers.extend((name.encode("latin-1"), value.encode("latin-1")) for name, value in req.headers.items())
            connect = min(cfg.connect_timeout, total)
            extensions = {"timeout": {"connect": connect, "read": total, "write": total, "pool": total}}
            target = httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path)
            self._in_use[key] += 1
            try:
                async with asyncio.timeout(total):
                    async with pool.stream("POST", target, headers=headers, content=req.body,
                                           extensions=extensions) as resp:
                        status = resp.status
                        retry_after = parse_retry_after(_header(resp.headers, b"retry-after"))
                        snippet = await _read_snippet(resp, cfg.snippet_bytes, cfg.max_response_bytes)
            finally:
                self._in_use[key] -= 1
                if self._in_use[key] <= 0:
                    del self._in_use[key]
        except DestinationForbiddenError as exc:
            error, message, details = SSRF_BLOCKED, exc.message, dict(exc.details)
        except (httpcore.TimeoutException, TimeoutError) as exc:
            error, message = TIMEOUT, _describe(exc) or f"no complete response within {total:g}s"
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
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


_CONTEXTS: dict[bool, ssl.SSLContext] = {}


def _ssl_context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    """The TLS context of https pools: the one given, else one per process (building it loads the CA bundle)."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    context = _CONTEXTS.get(verify)
    if context is None:
        context = _CONTEXTS[verify] = httpx.create_ssl_context(verify=verify, trust_env=False)
    return context


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _read_snippet(resp: httpcore.Response, snippet_bytes: int, max_bytes: int) -> str:
    buf = bytearray()
    async for chunk in resp.aiter_stream():
        if len(buf) < snippet_bytes:
            buf.extend(chunk[: snippet_bytes - len(buf)])
        max_bytes -= len(chunk)
        if max_bytes <= 0:
            break  # leaving the body unread closes this connection instead of returning it to the pool
    return bytes(buf).decode("utf-8", "replace")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
