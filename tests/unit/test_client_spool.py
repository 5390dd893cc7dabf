"""The client's spool file on its own (no API): events are stored durably in order, a batch keeps its events and
its Idempotency-Key across a reopen until it is marked sent, a blocked stream refuses new events and keeps its
reason, discarding unblocks it, export gives every event with its state."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from settlekit.client.errors import SpoolError
from settlekit.client.spool import Spool
from settlekit.events.envelope import Event, Signer, finalize, make_draft, verify_chain

SIGNER = Signer.generate()


def _builder(stream_id: str, n: int) -> Any:
    def build(prev: str | None) -> Event:
        draft = make_draft(stream_id=stream_id, type="JOB_HEARTBEAT", actor={"type": "robot", "id": "rob_1"},
                           payload={"progress": n}, at="2026-01-05T10:00:00.000Z")
        return finalize(draft, prev, SIGNER)

    return build


def _fill(spool: Spool, stream_id: str, count: int) -> list[Event]:
    return [spool.add(stream_id, _builder(stream_id, n)) for n in range(count)]


def test_the_file_is_synchronous_wal(tmp_path: Path) -> None:
    with Spool(tmp_path / "spool.db") as spool:
        assert spool._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert spool._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_events_chain_in_order_and_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "spool.db"
    with Spool(path) as spool:
        events = _fill(spool, "job_a", 5)
        spool.follow("job_b", "f" * 64)
        b = spool.add("job_b", _builder("job_b", 0))
    assert b["prevChainHash"] == "f" * 64
    verify_chain(events, {SIGNER.key_id: SIGNER.public_key_pem})
    with Spool(path) as spool:
        exported = list(spool.export("job_a"))
        assert [e["event"] for e in exported] == events
        assert {e["state"] for e in exported} == {"pending"}
        assert spool.head("job_a").chain_hash == events[-1]["chainHash"]
        assert spool.streams_to_send() == ["job_a", "job_b"]


def test_a_batch_keeps_its_events_and_key_until_sent(tmp_path: Path) -> None:
    path = tmp_path / "spool.db"
    with Spool(path) as spool:
        _fill(spool, "job_a", 7)
        first = spool.next_batch("job_a", max_events=3)
        assert first is not None and len(first.seqs) == 3
        _fill(spool, "job_a", 1)
    with Spool(path) as spool:  # a restart: the same batch, the same key
        again = spool.next_batch("job_a", max_events=5)
        assert again == first
        spool.mark_sent(first, ["c11", "c12", "c13"])
        second = spool.next_batch("job_a", max_events=100)
        assert second is not None and len(second.seqs) == 5 and second.idempotency_key != first.idempotency_key
        assert second.prev_chain_hash == list(spool.export())[2]["event"]["chainHash"]
        assert [e["position"] for e in spool.export()][:3] == ["c11", "c12", "c13"]


def test_a_blocked_stream_refuses_new_events_until_discarded(tmp_path: Path) -> None:
    with Spool(tmp_path / "spool.db") as spool:
        _fill(spool, "job_a", 2)
        _fill(spool, "job_b", 2)
        spool.block("job_a", "PREV_CHAIN_HASH_MISMATCH", "the stream moved", {"code": "PREV_CHAIN_HASH_MISMATCH"})
        assert spool.streams_to_send() == ["job_b"] and spool.next_batch("job_a") is None
        with pytest.raises(SpoolError) as refused:
            spool.add("job_a", _builder("job_a", 9))
        assert refused.value.code == "SPOOL_STREAM_BLOCKED" and refused.value.status == 409
        status = {s.stream_id: s.to_json() for s in spool.status()}
        assert status["job_a"]["state"] == "blocked" and status["job_a"]["pending"] == 2
        assert status["job_a"]["blocked"]["code"] == "PREV_CHAIN_HASH_MISMATCH"
        assert status["job_a"]["blocked"]["problem"] == {"code": "PREV_CHAIN_HASH_MISMATCH"}
        assert status["job_b"]["state"] == "pending"
        assert spool.discard("job_a", "e" * 64) == 2
        assert spool.add("job_a", _builder("job_a", 10))["prevChainHash"] == "e" * 64
        states = [e["state"] for e in spool.export("job_a")]
        assert states == ["discarded", "discarded", "pending"]


def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE spool_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO spool_meta VALUES ('format', 'something-else/9')")
    conn.commit()
    conn.close()
    with pytest.raises(SpoolError) as refused:
        Spool(path)
    assert refused.value.code == "SPOOL_INVALID"
    (tmp_path / "text.db").write_text("not a database " * 100)
    with pytest.raises(SpoolError):
        Spool(tmp_path / "text.db")


def test_prune_forgets_only_what_the_api_holds(tmp_path: Path) -> None:
    with Spool(tmp_path / "spool.db") as spool:
        _fill(spool, "job_a", 5)
        batch = spool.next_batch("job_a", max_events=3)
        assert batch is not None
        spool.mark_sent(batch, ["c1", "c2", "c3"])
        head = spool.head("job_a").chain_hash
        assert spool.prune("2000-01-01T00:00:00.000Z") == 0
        assert spool.prune("9999-01-01T00:00:00.000Z") == 3
        [status] = [s.to_json() for s in spool.status()]
        assert (status["pending"], status["sent"], status["headChainHash"]) == (2, 0, head)
        assert status["oldestPendingAt"] == list(spool.export())[0]["spooledAt"]
        assert spool.add("job_a", _builder("job_a", 9))["prevChainHash"] == head
