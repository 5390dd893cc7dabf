"""The job listing read model (store/streams.py) on both backends: the status filter runs in SQL and pages
exactly as filtering each stored snapshot in turn would, imported history (lone surrogates, U+0000 escapes in a
snapshot) included."""

from __future__ import annotations

import json
from typing import Any

import pytest

from settlekit.append import Appender
from settlekit.events.canonical import parse_json
from settlekit.events.envelope import Signer
from settlekit.store import streams
from settlekit.store.db import Database
from settlekit.store.signer_keys import SignerKeys
from settlekit.store.streams import Streams

TENANT = "t_list"
STATUSES = ["CREATED", "QUOTED", None, "QUOTED", "BOOKED", "QUOTED", "CREATED", "QUOTED", "BOOKED", "QUOTED",
            "CREATED", "QUOTED"]


def _snapshot(n: int, status: str | None) -> str | None:
    if n == 2:
        return None  # a stream stored without a snapshot
    snap: dict[str, Any] = {"jobId": f"job_{n:02d}", "nested": {"status": "NOT_THIS_ONE"}}
    if status is not None:
        snap["status"] = status
    text = json.dumps({"snapshot": snap, "fold": {"n": n}}, separators=(",", ":"))
    if n == 3:  # imported history: a lone surrogate and a U+0000, stored as escapes
        text = text.replace('"fold":', '"note":"\\ud800 \\\\ud800 \\u0000","fold":')
    return text


@pytest.fixture
def listed(db: Database) -> Database:
    with db.transaction() as tx:
        for n, status in enumerate(STATUSES):
            tx.execute("INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash,"
                       " head_event_id, snapshot_json) VALUES (?, ?, 'job', ?, ?, ?, ?)",
                       (TENANT, f"job_{n:02d}", n + 1, f"h{n}", f"e{n}", _snapshot(n, status)))
        tx.execute("INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash,"
                   " head_event_id, snapshot_json) VALUES (?, 'job_05a', 'other', 1, 'h', 'e', ?)",
                   (TENANT, json.dumps({"snapshot": {"status": "QUOTED"}}),))
        tx.execute("INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash,"
                   " head_event_id, snapshot_json) VALUES ('t_other', 'job_01', 'job', 1, 'h', 'e', ?)",
                   (json.dumps({"snapshot": {"status": "QUOTED"}}),))
    return db


def _reference(db: Database, status: str | None, after: str | None, limit: int,
               scan: int) -> tuple[list[str], str | None, bool]:
    """What the listing did before the filter moved into SQL: read the job rows in order, parse each snapshot,
    keep the matching ones, stop at `limit` matches or after `scan` rows."""
    with db.read() as tx:
        rows = tx.fetchall("SELECT stream_id, snapshot_json FROM streams WHERE tenant_id = ? AND stream_type = 'job'"
                           " ORDER BY stream_id", (TENANT,))
    rows = [r for r in rows if after is None or r[0] > after]
    budget = scan if status is not None else limit
    found: list[str] = []
    last = after
    for stream_id, snapshot_json in rows[:budget]:
        last = stream_id
        snap = (parse_json(snapshot_json) or {}).get("snapshot") if snapshot_json else None
        if status is None or (isinstance(snap, dict) and snap.get("status") == status):
            found.append(stream_id)
            if len(found) == limit:
                break
    more = last is not None and any(r[0] > last for r in rows)
    return found, last, more


@pytest.mark.parametrize("status", [None, "QUOTED", "BOOKED", "CREATED", "NOT_THIS_ONE", "NONE_SUCH"])
@pytest.mark.parametrize(("limit", "scan"), [(1, 1), (2, 3), (3, 20), (5, 5), (20, 200)])
def test_pages_match_filtering_each_snapshot(listed: Database, status: str | None, limit: int, scan: int) -> None:
    after: str | None = None
    for _ in range(30):
        page = streams.job_page(listed, TENANT, after=after, limit=limit, status=status, scan=scan)
        assert ([r.job_id for r in page.jobs], page.last_seen, page.more) == _reference(listed, status, after,
                                                                                         limit, scan)
        if not page.more:
            break
        after = page.last_seen
    else:
        pytest.fail("the pages never ended")


def test_rows_carry_the_stored_state(listed: Database) -> None:
    page = streams.job_page(listed, TENANT, after="job_02", limit=2, status="QUOTED", scan=10)
    assert [(r.job_id, r.version, r.head_chain_hash) for r in page.jobs] == [("job_03", 4, "h3"), ("job_05", 6, "h5")]
    assert page.jobs[0].state["snapshot"]["status"] == "QUOTED"
    assert page.jobs[0].state["note"] == "\ud800 \\ud800 \x00"
    none = streams.job_page(listed, TENANT, after="job_01", limit=1)
    assert [(r.job_id, r.state) for r in none.jobs] == [("job_02", None)] and none.more


def test_head_snapshot_and_keys_in_one_read(db: Database) -> None:
    """The head, its state and the named signer keys of the tenant, whether or not the stream or the keys exist."""
    keys, reads = SignerKeys(db), Streams(db)
    robot, operator, stranger = Signer.generate(), Signer.generate(), Signer.generate()
    robot_id = keys.register("t1", robot.public_key_pem, "robot", entity_id="rob_1")
    operator_id = keys.register("t1", operator.public_key_pem, "operator")
    other_tenant_id = keys.register("t2", stranger.public_key_pem, "robot")
    assert reads.head_snapshot_and_keys("t1", "s1", []) == (None, None, {})
    head, snapshot, found = reads.head_snapshot_and_keys("t1", "s1", [robot_id, other_tenant_id, "key_unknown"])
    assert (head, snapshot) == (None, None) and list(found) == [robot_id]
    assert (found[robot_id].purpose, found[robot_id].entity_id) == ("robot", "rob_1")
    Appender(db).append("t1", "s1", [{"type": "NOTE", "actor": {"type": "system", "id": "t"}, "payload": {}}],
                        expected_prev_chain_hash=None)
    head, snapshot, found = reads.head_snapshot_and_keys("t1", "s1", [robot_id, operator_id])
    assert head == reads.head("t1", "s1") and head is not None and head.seq == 1
    assert snapshot == reads.snapshot("t1", "s1")
    assert sorted(found) == sorted([robot_id, operator_id]) and found[operator_id].status == "active"
    assert reads.head_snapshot_and_keys("t1", "s1", []) == (head, snapshot, {})
