"""A dispatcher blocked by a full pending-gap list (PostgreSQL: gaps only exist there) waits between turns instead
of spinning, reports the oldest gap's age and names the blocking transaction in a rate-limited warning.

Turns are counted with the dispatcher's own turn counter over a window in which nothing can wake it: with a poll
interval far longer than the window, a waiting loop runs exactly one turn, a busy loop hundreds."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from test_dispatch_pg import append, holder

from settlekit.application.consumers import get_state
from settlekit.dispatch import SHARED_INSTANCE, Consumer, Dispatcher
from settlekit.dispatch.gaps import merge, oldest_seen_at, settle
from settlekit.store.consumers import Gap, dump_gaps, parse_gaps
from settlekit.store.db import Database


def burn(pg_url: str) -> None:
    """Draw a position in a transaction that rolls back: a hole that retires only once older writers end."""
    with psycopg.connect(pg_url) as conn:
        conn.execute("SELECT pg_current_xact_id()")
        conn.execute("SELECT nextval('events_position_seq')")
        conn.rollback()


def turns(reg: CollectorRegistry) -> float:
    return reg.get_sample_value("settlekit_dispatcher_turn_duration_seconds_count", {"consumer": "c"}) or 0.0


def sample(reg: CollectorRegistry, name: str) -> float:
    return reg.get_sample_value(name, {"consumer": "c", "instance_id": SHARED_INSTANCE}) or 0.0


class RecordingEvent(threading.Event):
    """A stop event that records each wait's timeout: once the loop waits, no turn runs until it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(timeout)


def wait_until(pred: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_full_gap_list_waits_reports_and_recovers(
    pg: Database, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []
    reg = CollectorRegistry()
    d = Dispatcher(pg, [Consumer("c", lambda e, ctx: seen.append(e.position))], registry=reg, batch_size=5,
                   max_pending_gap_ranges=2, listen=False, poll_interval=3600.0, gap_log_interval=3600.0,
                   wake_coalesce=0.0)  # the waits observed below are the poll interval's alone
    d.ensure_registered()
    t, _, release, out = holder(pg, "held", rollback=False)  # holds one position open
    try:
        append(pg, "s0")
        d.run_once()
        burn(pg_url)
        append(pg, "s1")
        d.run_once()
        state = get_state(pg, "c")
        assert state is not None and len(state.pending_gaps) == 2  # the limit
        burn(pg_url)
        blocked = append(pg, "s2", 12)  # more than a batch, behind a third hole

        with caplog.at_level(logging.WARNING, logger="settlekit.dispatch"):
            for _ in range(3):
                r = d.run_once().by_consumer["c"]
                assert (r.processed, r.outcome, r.blocked, r.more) == (0, "idle", True, False)
            warnings = [rec.getMessage() for rec in caplog.records if "pending gap ranges" in rec.getMessage()]
        assert len(warnings) == 1, warnings  # rate-limited
        assert "blocked by the transaction of backend pid" in warnings[0] and "open for" in warnings[0]
        assert sample(reg, "settlekit_consumer_blocked_turns_total") == 3
        assert sample(reg, "settlekit_consumer_oldest_gap_age_seconds") > 0

        # The background loop: one turn, then it waits for the whole poll interval (nothing notifies it).
        waits = RecordingEvent()
        d._stop = waits
        before = turns(reg)
        d.start()
        assert wait_until(lambda: waits.timeouts)
        during = turns(reg) - before
        d.stop()
        assert (during, waits.timeouts) == (1, [3600.0])
        assert not set(blocked) & set(seen)
    finally:
        release.set()
        t.join(10)
    assert out and isinstance(out[0], list)
    # The holder committed: its row resolves the first gap, which makes room for the third hole, so the
    # blocked events are delivered (the burnt holes retire later, once the cluster's oldest writer has ended).
    assert wait_until(lambda: (d.run_once(), set(blocked) <= set(seen))[1], timeout=60)
    assert out[0][0] in seen


def test_gap_timestamps_survive_merge_split_and_storage() -> None:
    a, b = Gap(1, 2, 10, 100.0), Gap(3, 4, 20, 50.0)
    (merged,) = merge([a, b])
    assert (merged, merged.seen_at) == (Gap(1, 4, 20), 50.0)
    assert merge([Gap(1, 1, 1), Gap(2, 2, 1, 7.0)])[0].seen_at == 7.0  # unknown (0) never wins
    remaining, _, _ = settle([Gap(1, 5, 100, 42.0)], resolved=[3], fetched=[3], horizon=50, complete_upto=9)
    assert [g.seen_at for g in remaining] == [42.0, 42.0]
    stored = dump_gaps([Gap(1, 5, 9, 42.5), Gap(7, 7, 9)])
    assert parse_gaps(stored) == [Gap(1, 5, 9), Gap(7, 7, 9)]
    assert [g.seen_at for g in parse_gaps(stored)] == [42.5, 0.0]
    assert parse_gaps('[{"from":1,"to":2,"xmax":"3"}]')[0].seen_at == 0.0  # rows written before the field
    assert oldest_seen_at(parse_gaps(stored)) == 42.5 and oldest_seen_at([]) is None


_gaps = st.lists(
    st.tuples(st.integers(1, 60), st.integers(0, 5), st.integers(1, 9), st.sampled_from([0.0, 10.0, 20.0, 30.0]))
    .map(lambda t: Gap(t[0], t[0] + t[1], t[2], t[3])),
    max_size=8,
)


@given(_gaps, st.lists(st.integers(1, 70), max_size=10), st.integers(0, 10))
def test_gap_times_are_never_invented_or_delayed(gaps: list[Gap], resolved: list[int], horizon: int) -> None:
    merged = merge(gaps)
    for g in merged:  # a merged range carries the earliest known time of the ranges it absorbed
        inside = [x.seen_at for x in gaps if g.lo <= x.lo and x.hi <= g.hi and x.seen_at]
        assert g.seen_at == (min(inside) if inside else 0.0)
    after, _, _ = settle(merged, resolved=resolved, fetched=resolved, horizon=horizon, complete_upto=10**9)
    for g in after:  # what remains of a range keeps its time
        (parent,) = [m for m in merged if m.lo <= g.lo and g.hi <= m.hi]
        assert g.seen_at == parent.seen_at


def test_turn_without_progress_does_not_ask_for_more(pg: Database, pg_url: str) -> None:
    """The old rule ("a full fetch means more") made the loop skip its wait forever while blocked."""
    d = Dispatcher(pg, [Consumer("c", lambda e, ctx: None)], registry=CollectorRegistry(), batch_size=3,
                   max_pending_gap_ranges=1, listen=False)
    d.ensure_registered()
    t, _, release, _ = holder(pg, "held", rollback=True)
    try:
        append(pg, "s0")
        assert d.run_once().by_consumer["c"].processed == 1
        burn(pg_url)
        append(pg, "s1", 5)
        r = d.run_once().by_consumer["c"]
        assert (r.processed, r.more, r.blocked) == (0, False, True)
    finally:
        release.set()
        t.join(10)
