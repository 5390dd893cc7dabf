"""A commit that names an API key (CommitBatch.active_api_key) writes nothing unless that key is still active, on
both backends and on every way a batch is written: alone (with and without follow-up writes, one event or many)
and in a group, where a revoked key's batch is left out and the others commit."""

from __future__ import annotations

import uuid
from typing import Any

from settlekit.api.auth import create_api_key, revoke_api_key
from settlekit.events.canonical import storable_json
from settlekit.events.envelope import Event, finalize_chain, make_draft
from settlekit.store.db import Database, Tx
from settlekit.store.events import CommitBatch, Committed, EventRecorder, KeyInactive
from settlekit.store.streams import Streams

T = "tenant_a"
ACTOR = {"type": "system", "id": "proxy"}


def _batch(stream_id: str, key_id: str | None, n: int = 1) -> CommitBatch:
    drafts = [make_draft(stream_id=stream_id, type="NOTE", actor=ACTOR, payload={"n": i}) for i in range(n)]
    events: list[Event] = finalize_chain(drafts, None)
    return CommitBatch(tenant_id=T, stream_id=stream_id, stream_type="generic", prev_chain_hash=None,
                       expected_version=None, events=events, jsons=[storable_json(e) for e in events],
                       snapshot_json=None, batch_id=str(uuid.uuid4()), active_api_key=key_id)


def _keys(db: Database) -> tuple[str, str]:
    active, _ = create_api_key(db, T, "jobs:write")
    revoked, _ = create_api_key(db, T, "jobs:write")
    revoke_api_key(db, revoked)
    return active, revoked


def test_a_batch_alone_commits_only_while_its_key_is_active(db: Database) -> None:
    active, revoked = _keys(db)
    recorder = EventRecorder(db)
    followed: list[int] = []

    def after(tx: Tx, base_seq: int, positions: list[int]) -> None:
        followed.append(base_seq)

    for n in (1, 3):
        for follow_up in (None, after):
            refused = recorder.commit(_batch(f"s_revoked_{n}_{follow_up is None}", revoked, n), follow_up)
            assert refused == KeyInactive(revoked)
            ok = recorder.commit(_batch(f"s_active_{n}_{follow_up is None}", active, n), follow_up)
            assert isinstance(ok, Committed) and len(ok.positions) == n
            unchecked = recorder.commit(_batch(f"s_unchecked_{n}_{follow_up is None}", None, n), follow_up)
            assert isinstance(unchecked, Committed)
    streams = Streams(db)
    assert [s.stream_id for s in streams.list_streams(T) if "revoked" in s.stream_id] == []
    assert len(followed) == 4  # the follow-up writes ran for the committed batches only


def test_a_group_leaves_out_the_batches_of_a_revoked_key(db: Database) -> None:
    """One-event batches share one statement, longer ones have one each; with follow-up writes the group is one
    transaction, without them (one-event batches) one statement in autocommit mode."""
    active, revoked = _keys(db)
    group = EventRecorder(db, group_commit=True).group
    assert group is not None
    followed: list[int] = []

    def after(tx: Tx, base_seq: int, positions: list[int]) -> None:
        followed.extend(positions)

    expected: set[str] = set()
    for n in (1, 2):
        for follow_up in (None, after):
            name = f"g{n}{'_after' if follow_up else ''}"
            batches = [_batch(f"{name}_{i}", revoked if i % 3 == 1 else active if i % 3 == 0 else None, n)
                       for i in range(7)]
            outcomes: list[Any] = group.write_group([(b, follow_up) for b in batches])
            for i, outcome in enumerate(outcomes):
                if i % 3 == 1:
                    assert outcome == KeyInactive(revoked)
                else:
                    assert isinstance(outcome, Committed) and len(outcome.positions) == n
            expected |= {f"{name}_{i}" for i in range(7) if i % 3 != 1}
            assert {s.stream_id for s in Streams(db).list_streams(T)} == expected
    assert len(followed) == 5 * (1 + 2)
