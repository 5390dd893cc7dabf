"""Bounded admission of work that waits for the database: a request beyond the bound is refused at once (503
OVERLOADED, nothing done) instead of queueing behind the others while memory and latency grow."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from settlekit.errors import OverloadedError, SettlekitError

P = ParamSpec("P")
T = TypeVar("T")


class BoundedThreadPool(ThreadPoolExecutor):
    """A thread pool that holds at most `max_pending` calls, running or queued; `submit` beyond that raises
    OverloadedError without queueing anything."""

    def __init__(self, threads: int, max_pending: int, *, thread_name_prefix: str = ""):
        super().__init__(threads, thread_name_prefix=thread_name_prefix)
        self.max_pending = max_pending
        self._pending = 0
        self._count_lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Calls submitted and not finished (running or queued)."""
        return self._pending

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        self._take()
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._finished()
            raise
        future.add_done_callback(self._on_done)
        return future

    def run(self, fn: Callable[..., T], /, *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` on a thread of the pool, its outcome awaited on the running event loop: what
        `loop.run_in_executor(pool, fn, *args)` gives, bounded as `submit`, without a concurrent Future chained to
        the asyncio one (the call hands its outcome to the loop itself). The caller's context variables are not
        carried: pass `contextvars.copy_context().run` and the function for that."""
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[T] = loop.create_future()
        self._take()
        try:
            with self._shutdown_lock:
                if self._shutdown:
                    raise RuntimeError("cannot schedule new futures after shutdown")
                # the executor's own queue and workers: they run any item with a run() method (_LoopCall)
                self._work_queue.put(_LoopCall(self, loop, outcome, fn, args))  # type: ignore[arg-type]
                self._adjust_thread_count()
        except BaseException:
            self._finished()
            raise
        return outcome

    def _take(self) -> None:
        with self._count_lock:
            if self._pending >= self.max_pending:
                raise OverloadedError(f"{self._pending} requests already wait for the database",
                                      queued=self._pending, limit=self.max_pending)
            self._pending += 1

    def _on_done(self, future: Future[Any]) -> None:
        self._finished()

    def _finished(self) -> None:
        with self._count_lock:
            self._pending -= 1


class _LoopCall:
    """A call queued by `BoundedThreadPool.run`: a pool thread runs it and hands its outcome to the caller's event
    loop; it gives its place in the bound back first. `future` is itself: what `shutdown(cancel_futures=True)`
    cancels of the items still queued."""

    __slots__ = ("args", "fn", "future", "loop", "outcome", "pool")

    def __init__(self, pool: BoundedThreadPool, loop: asyncio.AbstractEventLoop, outcome: asyncio.Future[Any],
                 fn: Callable[..., Any], args: tuple[Any, ...]):
        self.pool, self.loop, self.outcome, self.fn, self.args = pool, loop, outcome, fn, args
        self.future = self

    def run(self) -> None:
        try:
            result = self.fn(*self.args)
        except BaseException as exc:  # the caller's to see, as run_in_executor gives it
            self._settle(_set_exception, exc)
        else:
            self._settle(_set_result, result)

    def cancel(self) -> bool:
        self._settle(_set_cancelled, None)
        return True

    def _settle(self, settle: Callable[[asyncio.Future[Any], Any], None], value: Any) -> None:
        self.pool._finished()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for the outcome
            self.loop.call_soon_threadsafe(settle, self.outcome, value)


def _set_result(outcome: asyncio.Future[Any], value: Any) -> None:
    if not outcome.done():  # the waiter may have been cancelled meanwhile
        outcome.set_result(value)


def _set_exception(outcome: asyncio.Future[Any], exc: BaseException) -> None:
    if not outcome.done():
        outcome.set_exception(exc)


def _set_cancelled(outcome: asyncio.Future[Any], _: Any) -> None:
    outcome.cancel()


class OutboundBusyError(SettlekitError):
    """429: the tenant (or this process) has as many requests waiting on outside hosts as allowed."""

    code = "TEST_SEND_BUSY"
    status = 429


class OutboundSlots:
    """Requests of a route that waits on something outside (a test send to a tenant's URL, the DNS lookup of a
    destination's host): at most `per_tenant` of one tenant and `total` of all in flight in this process, so such
    requests can never hold the slots or threads other tenants' requests need. One more is refused at once with 429
    (`code`) and a Retry-After of the deadline. Thread-safe (sync routes run on worker threads)."""

    def __init__(self, *, per_tenant: int, total: int, timeout: float, code: str = "TEST_SEND_BUSY",
                 what: str = "test sends"):
        self.per_tenant, self.total, self.timeout, self.code, self.what = per_tenant, total, timeout, code, what
        self._held: dict[str, int] = {}
        self._count = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def slot(self, tenant_id: str) -> Iterator[None]:
        """Hold one slot of `tenant_id` while the body runs."""
        with self._lock:
            held = self._held.get(tenant_id, 0)
            if held >= self.per_tenant or self._count >= self.total:
                raise OutboundBusyError(f"{held} {self.what} of the tenant are in progress; retry later",
                                        code=self.code, retryAfterSeconds=max(1, math.ceil(self.timeout)),
                                        inFlight=held, limit=self.per_tenant)
            self._held[tenant_id] = held + 1
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1
                left = self._held[tenant_id] - 1
                if left:
                    self._held[tenant_id] = left
                else:
                    del self._held[tenant_id]
