"""An idle dispatcher on PostgreSQL relies on LISTEN: after each pass in which nothing could move, its wait
doubles up to `idle_poll_max`, and a NOTIFY (an append's commit) wakes it at once and brings the wait back to
`poll_interval`. Without a wake-up that crosses processes (SQLite's is in-process) it keeps polling at
`poll_interval`. No timed assertions: the waits are observed, not timed; bounds are hang guards."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from settlekit.append import Appender
from settlekit.dispatch import Consumer, ConsumerContext, DispatchedEvent, Dispatcher
from settlekit.store.db import Database

HANG_GUARD = 60.0
ACTOR = {"type": "system", "id": "test"}


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.01)


def _append(db: Database, stream: str) -> None:
    Appender(db).append("t1", stream, [{"type": "T", "actor": ACTOR, "payload": {}}], expected_version=0)


class _Recorded:
    """The dispatcher's waits (timeout asked, woken or not) and passes, as they happen."""

    def __init__(self, dispatcher: Dispatcher):
        self.waits: list[tuple[float, bool]] = []
        self.passes = 0
        self.lock = threading.Lock()
        db = dispatcher.db
        wait, run_once = db.wait_for_notify, dispatcher.run_once

        def recorded_wait(timeout: float) -> bool:
            woke = wait(timeout)
            with self.lock:
                self.waits.append((timeout, woke))
            return woke

        def counted_pass() -> Any:
            with self.lock:
                self.passes += 1
            return run_once()

        db.wait_for_notify = recorded_wait  # type: ignore[method-assign]
        dispatcher.run_once = counted_pass  # type: ignore[method-assign]


def test_an_idle_dispatcher_backs_off_and_a_notify_wakes_it(pg: Database) -> None:
    seen: list[int] = []

    def handler(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        seen.append(event.position)

    d = Dispatcher(pg, [Consumer("idle", handler)], poll_interval=0.05, idle_poll_max=600,
                   registry=CollectorRegistry())
    recorded = _Recorded(d)
    d.start()
    try:
        # idle: each wait twice the one before (0.05, 0.1, … 3.2 s), one pass each: not one pass per 0.05 s
        _until(lambda: any(timeout >= 3.2 for timeout, _ in list(recorded.waits)), "the wait grows")
        with recorded.lock:
            waits, passes = list(recorded.waits), recorded.passes
        assert [t for t, _ in waits[:7]] == [0.05 * 2 ** k for k in range(7)], waits
        assert passes <= len(waits) + 1
        # a commit wakes it long before that wait ends (600 s at most), and the wait starts again from 0.05
        _append(pg, "s1")
        _until(lambda: len(seen) == 1, "the event is dispatched")
        with recorded.lock:
            after = recorded.waits[len(waits):]
        assert after and after[0][1] is True, after  # the wait in progress was woken, not timed out
        _until(lambda: len(recorded.waits) > len(waits) + 1, "a wait after the pass")
        with recorded.lock:
            assert recorded.waits[len(waits) + 1][0] == 0.05, recorded.waits[len(waits):]
    finally:
        d.stop()


def test_without_a_wake_up_across_processes_it_keeps_polling(sqlite_db: Database) -> None:
    d = Dispatcher(sqlite_db, [Consumer("idle", lambda event, ctx: None)], poll_interval=0.02, idle_poll_max=600,
                   registry=CollectorRegistry())
    recorded = _Recorded(d)
    d.start()
    try:
        _until(lambda: len(recorded.waits) >= 10, "ten idle waits")
        with recorded.lock:
            assert {timeout for timeout, _ in recorded.waits} == {0.02}
    finally:
        d.stop()
