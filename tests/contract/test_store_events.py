"""The event recorder's contract (store/events.py), on both backends: a CommitBatch is written whole, in one
transaction, only onto the head it expects."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from settlekit.events.canonical import storable_json
from settlekit.events.envelope import Event, finalize_chain, make_draft
from settlekit.store.db import Database, Tx
from settlekit.store.events import CommitBatch, Committed, DuplicateKey, EventRecorder, HeadMismatch
from settlekit.store.streams import Streams

T = "tenant_a"
ACTOR = {"type": "system", "id": "proxy"}


def _events(stream_id: str, n: int, prev: str | None = None) -> list[Event]:
    drafts = [make_draft(stream_id=stream_id, type="NOTE", actor=ACTOR, payload={"n": i}) for i in range(n)]
    return finalize_chain(drafts, prev)


def _batch(stream_id: str, events: list[Event], prev: str | None, *, expected_version: int | None = None,
           snapshot: Any = None) -> CommitBatch:
    return CommitBatch(tenant_id=T, stream_id=stream_id, stream_type="generic", prev_chain_hash=prev,
                       expected_version=expected_version, events=events, jsons=[storable_json(e) for e in events],
                       snapshot_json=None if snapshot is None else storable_json(snapshot),
                       batch_id=str(uuid.uuid4()))


def test_a_batch_creates_then_extends_a_stream(db: Database) -> None:
    recorder, streams = EventRecorder(db), Streams(db)
    first = _events("s", 2)
    done = recorder.commit(_batch("s", first, None, snapshot={"v": 1}))
    assert isinstance(done, Committed) and done.base_seq == 0 and len(done.positions) == 2
    more = _events("s", 1, first[-1]["chainHash"])
    done = recorder.commit(_batch("s", more, first[-1]["chainHash"], expected_version=2))
    assert isinstance(done, Committed) and done.base_seq == 2
    assert streams.read_stream(T, "s") == first + more
    head, snapshot = streams.head_and_snapshot(T, "s")
    assert head is not None and (head.seq, head.chain_hash) == (3, more[-1]["chainHash"])
    assert snapshot == {"v": 1}  # a batch without a snapshot keeps the stored one


def test_a_batch_on_another_head_writes_nothing(db: Database) -> None:
    recorder, streams = EventRecorder(db), Streams(db)
    first = _events("s", 1)
    recorder.commit(_batch("s", first, None))
    assert recorder.commit(_batch("s", _events("s", 1), None)) == HeadMismatch(1, first[0]["chainHash"])
    stale = recorder.commit(_batch("s", _events("s", 1, first[0]["chainHash"]), first[0]["chainHash"],
                                   expected_version=5))
    assert stale == HeadMismatch(1, first[0]["chainHash"])
    assert recorder.commit(_batch("t", _events("t", 1, "0" * 64), "0" * 64)) == HeadMismatch(None, None)
    assert streams.read_stream(T, "s") == first and streams.head(T, "t") is None


def test_after_runs_in_the_batch_transaction(db: Database) -> None:
    recorder, streams = EventRecorder(db), Streams(db)
    seen: list[tuple[int, list[int]]] = []

    def after(tx: Tx, base_seq: int, positions: list[int]) -> None:
        seen.append((base_seq, positions))
        raise RuntimeError("refused after the insert")

    with pytest.raises(RuntimeError):
        recorder.commit(_batch("s", _events("s", 2), None), after)
    assert len(seen) == 1 and seen[0][0] == 0 and len(seen[0][1]) == 2
    assert streams.head(T, "s") is None and streams.read_stream(T, "s") == []


def test_a_stored_event_id_is_a_duplicate_key(db: Database) -> None:
    recorder = EventRecorder(db)
    events = _events("s", 1)
    recorder.commit(_batch("s", events, None))
    copy = [{**events[0], "streamId": "other"}]
    with pytest.raises(DuplicateKey) as err:
        recorder.commit(_batch("other", copy, events[0]["prevChainHash"]))
    assert err.value.kind == "event_id"
    assert Streams(db).head(T, "other") is None


def test_creates_stream_only_without_an_expected_head() -> None:
    events = _events("s", 1)
    assert _batch("s", events, None).creates_stream
    assert _batch("s", events, None, expected_version=0).creates_stream
    assert not _batch("s", events, None, expected_version=1).creates_stream
    assert not _batch("s", events, "a" * 64).creates_stream


@pytest.mark.parametrize(("constraint", "kind"), [
    ("idempotency_keys_pkey", "idempotency"),
    ("UNIQUE constraint failed: idempotency_keys.tenant_id, idempotency_keys.principal_id", "idempotency"),
    ("events_tenant_event_id", "event_id"),
    ("UNIQUE constraint failed: events.tenant_id, events.event_id", "event_id"),
    ("events_stream_seq", "stream"),
    ("events_stream_chain_hash", "stream"),
    ("UNIQUE constraint failed: events.tenant_id, events.stream_id, events.seq", "stream"),
    ("UNIQUE constraint failed: streams.tenant_id, streams.stream_id", "stream"),
    ("ledger_allocations_pkey", "other"),
    ("UNIQUE constraint failed: ledger_allocations.tenant_id, ledger_allocations.entry_id", "other"),
])
def test_a_broken_uniqueness_rule_is_named_by_its_table(constraint: str, kind: str) -> None:
    """Only the stream's own rules mean a concurrent append (answered 409); another table's rule is a fault."""
    assert DuplicateKey(constraint).kind == kind
