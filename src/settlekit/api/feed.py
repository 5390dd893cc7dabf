"""The event feed's Server-Sent Events: per-tenant connection counts, one shared watch for newly settled
positions, and the stream body (`id:` the position's cursor, `data:` the envelope as stored, comment heartbeats).

New events are noticed by one process-wide watch, not one per client: it reads the settled bound after every
append wake-up of the database (PostgreSQL: a LISTEN session of its own on the direct URL, `SETTLEKIT_DB_DIRECT`
behind PgBouncer, apart from the dispatcher's; SQLite: the in-process wake-up) and at least every
`feed_poll_interval` (a rolled-back hole wakes nobody). `close()` ends every open stream within one poll interval;
`serve` calls it when it starts to shut down.

A stream that cannot go on (the database unavailable while it reads, or while it checks its key) ends with one
last message, `event: problem`, whose `data` is the problem body (`code`, `details.retryAfterSeconds`) and whose
`retry` is that delay in milliseconds, then a well-formed end of the body: the client resumes with the id of the
last event it received (Last-Event-ID). Once the answer has started, an error cannot become a problem response.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence

import anyio.to_thread
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from settlekit.api.responses import dumps
from settlekit.application.database import EventListener
from settlekit.application.jobs import FeedEvent, FeedPage, FeedReader
from settlekit.errors import SettlekitError

log = logging.getLogger("settlekit.api.feed")


class FeedStreamLimitError(SettlekitError):
    """429: the tenant already holds its allowed number of open event streams."""

    code = "FEED_STREAM_LIMIT"
    status = 429


EventIds = Callable[[Sequence[int]], Sequence[str]]
"""The ids a stream shows for event positions (the tenant's cursors, settlekit/cursors.py)."""


def sse_events(events: Sequence[FeedEvent], event_ids: EventIds | None = None) -> bytes:
    """Events as SSE messages: `id` the position (as `event_ids` shows it), `data` the envelope JSON as stored
    (one line)."""
    positions = [e.position for e in events]
    ids = event_ids(positions) if event_ids is not None else [str(p) for p in positions]
    return "".join(f"id: {i}\ndata: {e.raw_json}\n\n" for i, e in zip(ids, events, strict=True)).encode("utf-8")


HEARTBEAT = b": heartbeat\n\n"


def sse_problem(exc: SettlekitError) -> bytes:
    """The last message of a stream that ends on `exc`: `event: problem`, the problem body as `data`, and its
    Retry-After as the client's reconnection delay (`retry`, milliseconds)."""
    retry = exc.details.get("retryAfterSeconds")
    head = f"retry: {int(retry) * 1000}\n" if isinstance(retry, int) else ""
    return b"event: problem\n" + head.encode() + b"data: " + dumps(exc.to_problem()) + b"\n\n"


class FeedStreams:
    """Open event streams of one API process."""

    def __init__(self, reader: FeedReader, *, max_per_tenant: int, poll_interval: float,
                 heartbeat_interval: float):
        self.reader = reader
        self.max_per_tenant = max_per_tenant
        self.poll_interval = poll_interval
        self.heartbeat_interval = heartbeat_interval
        self.closing = False
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()
        self._bound = 0
        self._changed: asyncio.Event | None = None
        self._watcher: asyncio.Task[None] | None = None

    def open_count(self, tenant_id: str) -> int:
        with self._lock:
            return self._open.get(tenant_id, 0)

    def acquire(self, tenant_id: str) -> Callable[[], None]:
        """Count one more open stream of the tenant (FeedStreamLimitError past the limit); returns its release."""
        with self._lock:
            if self._open.get(tenant_id, 0) >= self.max_per_tenant:
                # a client that went away frees its slot when the next heartbeat finds the connection closed
                raise FeedStreamLimitError(
                    f"this tenant already has {self.max_per_tenant} open event streams",
                    limit=self.max_per_tenant, retryAfterSeconds=max(1, round(self.heartbeat_interval)))
            self._open[tenant_id] = self._open.get(tenant_id, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if not released:
                    released = True
                    self._open[tenant_id] -= 1
                    if not self._open[tenant_id]:
                        del self._open[tenant_id]

        return release

    def close(self) -> None:
        """End every open stream (within one poll interval) and refuse none; safe from a signal handler."""
        self.closing = True

    def response(self, tenant_id: str, after: int, types: Sequence[str], limit: int,
                 key_active: Callable[[], bool] | None = None,
                 event_ids: EventIds | None = None) -> StreamingResponse:
        """The stream of the tenant's events past `after` (FeedStreamLimitError over the tenant's limit); with
        `key_active`, the stream ends once it answers False (asked every heartbeat interval); `event_ids`: the
        SSE ids of positions (default: the positions)."""
        release = self.acquire(tenant_id)
        return _ReleasingStream(self.events(tenant_id, after, types, limit, key_active, event_ids), release)

    async def events(self, tenant_id: str, after: int, types: Sequence[str], limit: int,
                     key_active: Callable[[], bool] | None = None,
                     event_ids: EventIds | None = None) -> AsyncIterator[bytes]:
        """The stream body (`_events`); one that cannot go on ends with `sse_problem` (see the module
        docstring)."""
        try:
            async for chunk in self._events(tenant_id, after, types, limit, key_active, event_ids):
                yield chunk
        except SettlekitError as exc:
            log.warning("event stream ended: %s", exc.code, extra={"tenant": tenant_id, "error_code": exc.code,
                                                                   "cause": exc.message})
            yield sse_problem(exc)

    async def _events(self, tenant_id: str, after: int, types: Sequence[str], limit: int,
                      key_active: Callable[[], bool] | None = None,
                      event_ids: EventIds | None = None) -> AsyncIterator[bytes]:
        """Pages of events as they settle, a heartbeat after each quiet interval; it ends when the process closes
        or `key_active` says the key was revoked: asked before each page of events is sent (in the page's thread
        trip), and every heartbeat interval while nothing is sent."""
        position = after
        quiet_since = checked_at = time.monotonic()
        yield b": connected\n\n"
        read = functools.partial(self._read_page, tenant_id, types=types, limit=limit, key_active=key_active)
        while not self.closing:
            if key_active is not None and time.monotonic() - checked_at >= self.heartbeat_interval:
                if not await anyio.to_thread.run_sync(key_active):
                    return
                checked_at = time.monotonic()
            seen = self._bound
            page, active = await anyio.to_thread.run_sync(read, position)
            if not active:
                return
            position = page.scanned  # the stream's own position is never shown: it may pass the settled bound
            if page.events:
                checked_at = time.monotonic()
                yield sse_events(page.events, event_ids)
                quiet_since = time.monotonic()
                if len(page.events) >= limit:
                    continue
            elif time.monotonic() - quiet_since >= self.heartbeat_interval:
                yield HEARTBEAT
                quiet_since = time.monotonic()
            wait = min(self.poll_interval, self.heartbeat_interval - (time.monotonic() - quiet_since))
            await self._wait_past(seen, max(wait, 0.0))

    def _read_page(self, tenant_id: str, position: int, *, types: Sequence[str], limit: int,
                   key_active: Callable[[], bool] | None) -> tuple[FeedPage, bool]:
        """The next page, and whether its events may be sent: the key is asked again when there are some, so a
        revoked key receives no event committed after its revocation was."""
        page = self.reader.read(tenant_id, position, types=types, limit=limit)
        return page, not page.events or key_active is None or key_active()

    async def _wait_past(self, seen: int, timeout: float) -> None:
        """Until the shared settled bound moves past `seen`, or `timeout` seconds."""
        self._ensure_watcher()
        changed = self._changed
        if self._bound > seen or changed is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout)

    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._changed = asyncio.Event()
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """While streams are open: move the shared settled bound and wake the streams, after each append (the
        database's wake-ups) or each poll interval, whichever comes first."""
        listener = self.reader.db.event_listener()
        try:
            while not self.closing and self._any_open():
                try:
                    bound = await anyio.to_thread.run_sync(self.reader.safe_bound, self._bound)
                except SettlekitError:
                    bound = self._bound  # the database is away: the streams' own reads report it
                if bound > self._bound and self._changed is not None:
                    self._bound = bound
                    changed, self._changed = self._changed, asyncio.Event()
                    changed.set()
                await anyio.to_thread.run_sync(self._wait, listener)
        finally:
            with contextlib.suppress(Exception):
                listener.close()

    def _any_open(self) -> bool:
        with self._lock:
            return bool(self._open)

    def _wait(self, listener: EventListener) -> None:
        """One poll interval, cut short by an append; a failing wake-up source leaves plain polling."""
        started = time.monotonic()
        try:
            listener.wait(self.poll_interval)
        except SettlekitError:
            time.sleep(max(0.0, self.poll_interval - (time.monotonic() - started)))


class _ReleasingStream(StreamingResponse):
    """A StreamingResponse that gives its connection slot back however the response ends."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None]):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
