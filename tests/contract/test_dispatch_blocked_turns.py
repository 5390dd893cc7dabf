"""A blocked turn costs one short statement whatever the size of the pending-gap list while nothing that could
unblock it happened since the last full turn (its state row unchanged, the same first position past the cursor,
every transaction running then still running); anything else, or BLOCKED_RECHECK seconds, makes it a full turn
again, so a gap filled or retired is seen at the next turn as before. PostgreSQL only (gaps only exist there)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from test_dispatch_blocked import burn, wait_until
from test_dispatch_pg import append, holder

from settlekit.application.consumers import get_state
from settlekit.dispatch import Consumer, Dispatcher
from settlekit.dispatch import dispatcher as dispatcher_module
from settlekit.store.db import Database


def _blocked_dispatcher(pg: Database, pg_url: str, seen: list[int]) -> tuple[Dispatcher, list[int]]:
    d = Dispatcher(pg, [Consumer("c", lambda e, ctx: seen.append(e.position))], registry=CollectorRegistry(),
                   batch_size=5, max_pending_gap_ranges=2, listen=False, poll_interval=3600.0,
                   gap_log_interval=3600.0)
    d.ensure_registered()
    return d, []


def _count_full_turns(d: Dispatcher) -> list[int]:
    """Each full turn's fetch, counted."""
    fetches: list[int] = []
    fetch = d.repo.fetch_events

    def counted(*args: Any, **kwargs: Any) -> Any:
        fetches.append(1)
        return fetch(*args, **kwargs)

    d.repo.fetch_events = counted  # type: ignore[method-assign]
    return fetches


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_blocked_turns_are_cheap_until_something_changes(pg: Database, pg_url: str, outcome: str) -> None:
    seen: list[int] = []
    d, _ = _blocked_dispatcher(pg, pg_url, seen)
    t, _, release, out = holder(pg, "held", rollback=outcome == "rollback")  # holds one position open
    try:
        append(pg, "s0")
        d.run_once()
        burn(pg_url)
        append(pg, "s1")
        d.run_once()
        state = get_state(pg, "c")
        assert state is not None and len(state.pending_gaps) == 2  # the limit
        burn(pg_url)
        blocked = append(pg, "s2", 3)  # behind a third hole
        fetches = _count_full_turns(d)
        r = d.run_once().by_consumer["c"]
        assert (r.processed, r.outcome, r.blocked) == (0, "idle", True) and len(fetches) == 1
        for _ in range(3):  # nothing changed: no fetch, the same answer
            r = d.run_once().by_consumer["c"]
            assert (r.processed, r.outcome, r.blocked) == (0, "idle", True)
        assert len(fetches) == 1
        append(pg, "s3")  # above the blocking row: it cannot unblock anything
        d.run_once()
        assert len(fetches) == 1
        assert not set(blocked) & set(seen)
    finally:
        release.set()
        t.join(10)
    # the holder ended: the next turn is a full one; a committed row fills its gap and makes room for the third
    # hole, a rolled-back one retires once the cluster's oldest writer has ended
    r = d.run_once().by_consumer["c"]
    assert len(fetches) == 2
    assert wait_until(lambda: (d.run_once(), set(blocked) <= set(seen))[1], timeout=60)
    if outcome == "commit":
        assert out and out[0][0] in seen


def test_a_state_change_or_the_recheck_interval_makes_a_full_turn(pg: Database, pg_url: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    d, _ = _blocked_dispatcher(pg, pg_url, seen)
    t, _, release, _ = holder(pg, "held", rollback=False)
    try:
        append(pg, "s0")
        d.run_once()
        burn(pg_url)
        append(pg, "s1")
        d.run_once()
        burn(pg_url)
        append(pg, "s2", 3)
        fetches = _count_full_turns(d)
        d.run_once()
        d.run_once()
        assert len(fetches) == 1
        with pg.transaction() as tx:  # anything that writes the state row (an operator's action, say)
            tx.execute("UPDATE consumer_state SET updated_at = now() WHERE name = 'c'")
        d.run_once()
        assert len(fetches) == 2
        d.run_once()
        assert len(fetches) == 2
        monkeypatch.setattr(dispatcher_module, "BLOCKED_RECHECK", 0.0)
        d.run_once()
        d.run_once()
        assert len(fetches) == 4
    finally:
        release.set()
        t.join(10)
