"""Bounded admission of work that waits for the database: a request beyond the bound is refused at once (503
OVERLOADED, nothing done) instead of queueing behind the others while memory and latency grow."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from settlekit.errors import OverloadedError

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
        with self._count_lock:
            if self._pending >= self.max_pending:
                raise OverloadedError(f"{self._pending} requests already wait for the database",
                                      queued=self._pending, limit=self.max_pending)
            self._pending += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._finished()
            raise
        future.add_done_callback(self._on_done)
        return future

    def _on_done(self, future: Future[Any]) -> None:
        self._finished()

    def _finished(self) -> None:
        with self._count_lock:
            self._pending -= 1
