"""Pass pacing: under a steady stream of commits a pass starts no sooner than `wake_coalesce` after the previous
one started, so one pass (one transaction) takes what several commits wrote; a backlog read in full batches is not
paced. No timed assertions: pass start times are observed and compared with the pacing asked for; bounds are hang
guards."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry

from settlekit.append import Appender
from settlekit.dispatch import Consumer, ConsumerContext, DispatchedEvent, Dispatcher
from settlekit.store.db import Database

HANG_GUARD = 60.0
ACTOR = {"type": "system", "id": "test"}


def _until_seen(seen: set[int], count: int) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while len(seen) < count:
        assert time.monotonic() < deadline, f"hang guard: {len(seen)} of {count} events handled"
        time.sleep(0.01)


def _pass_starts(dispatcher: Dispatcher) -> list[tuple[float, bool]]:
    """Each pass's start (monotonic) and whether it read a full batch (the next one is not paced)."""
    starts: list[tuple[float, bool]] = []
    run_once = dispatcher.run_once

    def recorded() -> Any:
        started = time.monotonic()
        result = run_once()
        starts.append((started, any(r.more for r in result.by_consumer.values())))
        return result

    dispatcher.run_once = recorded  # type: ignore[method-assign]
    return starts


def test_passes_under_a_steady_stream_of_commits_are_paced(db: Database) -> None:
    seen: set[int] = set()

    def handler(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        seen.add(event.position)

    pacing = 0.05
    dispatcher = Dispatcher(db, [Consumer("paced", handler)], wake_coalesce=pacing, poll_interval=0.1,
                            registry=CollectorRegistry())
    starts = _pass_starts(dispatcher)
    dispatcher.start()
    try:
        appender = Appender(db)
        commits = 150
        for i in range(commits):  # a commit every millisecond or two, each waking the dispatcher
            appender.append("t1", f"s{i}", [{"type": "T", "actor": ACTOR, "payload": {}}], expected_version=0)
            time.sleep(0.001)
        _until_seen(seen, commits)
    finally:
        dispatcher.stop()
    gaps = [later - earlier for (earlier, full), (later, _) in zip(starts, starts[1:], strict=False) if not full]
    assert gaps and min(gaps) >= pacing * 0.95, [round(g, 4) for g in gaps]
    assert len(starts) < commits / 2, "several commits per pass"


def test_a_backlog_read_in_full_batches_is_not_paced(db: Database) -> None:
    appender = Appender(db)
    for i in range(50):
        appender.append("t1", f"s{i}", [{"type": "T", "actor": ACTOR, "payload": {}}], expected_version=0)
    seen: set[int] = set()

    def handler(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        seen.add(event.position)

    # paced, the five batches would take four minutes; a backlog is read at once
    dispatcher = Dispatcher(db, [Consumer("backlog", handler)], batch_size=10, wake_coalesce=60.0,
                            registry=CollectorRegistry())
    starts = _pass_starts(dispatcher)
    dispatcher.start()
    try:
        _until_seen(seen, 50)
    finally:
        dispatcher.stop(timeout=HANG_GUARD)
    assert sum(1 for _, full in starts if full) >= 5
