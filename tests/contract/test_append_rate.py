"""The overview's append rate, read from the database on both backends: the position recorded at an instant found
by a binary search over the primary key, the last minute and hour deployment-wide (exact per-minute counts for a
small hour, sampled positions for a large one) and per tenant (its index only, capped)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from settlekit.append import job_appender
from settlekit.events.envelope import Signer, finalize, make_draft
from settlekit.store import append_rate
from settlekit.store.db import Database
from settlekit.store.sql import timestamp

SIGNER = Signer.generate()
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# (tenant, seconds before NOW each event was recorded), in append order
PLAN = ([("t_a", 7200)] * 3 + [("t_b", 1800)] * 4 + [("t_a", 1799)] * 2 + [("t_a", 90)] * 3 + [("t_b", 30)] * 2
        + [("t_a", 10)] * 2)


def _seed(db: Database) -> None:
    appender = job_appender(db, server_rules=False, server_signer=SIGNER)
    for tenant, _ in PLAN:
        stream = f"s_{uuid.uuid4().hex[:8]}"
        draft = make_draft(stream_id=stream, type="JOB_CREATED", actor={"type": "system", "id": "t"},
                           payload={"tenantId": tenant, "templateId": "t"},
                           at="2026-03-01T00:00:00.000Z", id=f"evt_{uuid.uuid4().hex[:12]}")
        appender.append(tenant, stream, [finalize(draft, None, SIGNER)])
    with db.transaction() as tx:
        positions = [int(r[0]) for r in tx.fetchall("SELECT position FROM events ORDER BY position")]
        assert len(positions) == len(PLAN)
        for position, (_, ago) in zip(positions, PLAN, strict=True):
            tx.execute("UPDATE events SET recorded_at = ? WHERE position = ?",
                       (timestamp(tx.dialect, NOW - timedelta(seconds=ago)), position))


@pytest.fixture
def seeded(db: Database) -> Database:
    _seed(db)
    return db


def test_an_empty_log_appends_nothing(db: Database) -> None:
    assert append_rate.deployment_rate(db, NOW) == append_rate.AppendRate(0, 0, [0] * 60)
    assert append_rate.tenant_recent(db, "t_a", NOW) == (0, 0)


def test_the_deployment_rate_counts_the_last_minute_and_hour(seeded: Database) -> None:
    rate = append_rate.deployment_rate(seeded, NOW)
    assert (rate.last_minute, rate.last_hour) == (4, 13)
    assert sum(rate.per_minute) == 13 and rate.per_minute[30] == 6 and rate.per_minute[58] == 3
    assert rate.per_minute[59] == 4


def test_a_large_hour_is_placed_by_sampled_positions(seeded: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(append_rate, "EXACT_ROWS", 0)
    monkeypatch.setattr(append_rate, "SAMPLES", 5)
    rate = append_rate.deployment_rate(seeded, NOW)
    assert (rate.last_minute, rate.last_hour) == (4, 13)  # positions between the bounds the search found
    assert sum(rate.per_minute) == 13 and rate.per_minute[59] >= 1 and sum(rate.per_minute[:30]) == 0


def test_a_tenant_sees_its_own_events_counted_up_to_a_cap(seeded: Database,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert append_rate.tenant_recent(seeded, "t_a", NOW) == (2, 7)
    assert append_rate.tenant_recent(seeded, "t_b", NOW) == (2, 6)
    assert append_rate.tenant_recent(seeded, "t_none", NOW) == (0, 0)
    monkeypatch.setattr(append_rate, "TENANT_CAP", 3)
    assert append_rate.tenant_recent(seeded, "t_a", NOW) == (2, 3)


def test_the_search_finds_the_last_position_before_every_instant(seeded: Database,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with seeded.transaction() as tx:  # gaps in the positions, as rolled-back appends leave
        rows = tx.fetchall("SELECT position FROM events ORDER BY position")
        tx.execute("DELETE FROM events WHERE position IN (?, ?, ?)", (rows[1][0], rows[5][0], rows[6][0]))
        recorded = [(int(p), append_rate.from_timestamp(r)) for p, r in
                    tx.fetchall("SELECT position, recorded_at FROM events ORDER BY position")]
        low, high = recorded[0][0], recorded[-1][0]
        instants = sorted({r + timedelta(seconds=d) for _, r in recorded if r for d in (-1, 0, 1)})
        for fanout in (1, 2, 3, 64):  # 64: the rows left are read whole at once
            monkeypatch.setattr(append_rate, "SEARCH_FANOUT", fanout)
            for at in [NOW - timedelta(days=1), *instants, NOW + timedelta(days=1)]:
                expected = max((p for p, r in recorded if r and r < at), default=low - 1)
                assert append_rate._position_before(tx, at, low, high) == expected, (fanout, at)
