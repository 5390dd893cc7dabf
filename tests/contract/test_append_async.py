"""Appender.append_async, on both backends, with and without group commit: the same answers as Appender.append
(one flow, two drivers), its rarer reads (idempotency, conflicts, replays) included, and an append whose caller
stops waiting is still written, with the group commit writer left running."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from settlekit.append import Appender, Idempotency
from settlekit.errors import ConflictError
from settlekit.events.envelope import Event, finalize_chain, make_draft
from settlekit.store.db import Database

T = "tenant_a"
ACTOR = {"type": "system", "id": "proxy"}
NOTE = {"type": "NOTE", "actor": ACTOR, "payload": {"n": 1}}


def _finalized(stream_id: str, n: int = 1, prev: str | None = None) -> list[Event]:
    drafts = [make_draft(stream_id=stream_id, type="NOTE", actor=ACTOR, payload={"n": i}) for i in range(n)]
    return finalize_chain(drafts, prev)


@pytest.fixture(params=[False, True], ids=["direct", "group"])
def appender(db: Database, request: pytest.FixtureRequest) -> Any:
    store = Appender(db, group_commit=request.param)
    yield store
    store.close()


def test_drafts_and_client_events_append_as_with_the_blocking_driver(appender: Appender) -> None:
    client = _finalized("s_2", 3)

    async def run() -> None:
        first = await appender.append_async(T, "s_1", [NOTE, NOTE], expected_prev_chain_hash=None)
        assert first.first_seq == 1 and len(first.events) == 2 and not first.already_exists
        second = await appender.append_async(T, "s_1", [NOTE], expected_version=2)
        assert second.first_seq == 3 and second.events[0]["prevChainHash"] == first.head_chain_hash
        done = await appender.append_async(T, "s_2", client)
        assert done.head_chain_hash == client[-1]["chainHash"] and len(done.positions) == 3

    asyncio.run(run())
    assert appender.streams.read_stream(T, "s_2") == client
    assert appender.streams.head(T, "s_1").seq == 3  # type: ignore[union-attr]


def test_conflicts_replays_and_idempotency_take_the_reads_off_the_loop(appender: Appender) -> None:
    """The rarer paths read the database: a moved head (409 with the current head), the same client events sent
    again (alreadyExists), an idempotency key answered from its stored record."""
    client = _finalized("s_c", 2)

    async def run() -> None:
        await appender.append_async(T, "s_c", client)
        again = await appender.append_async(T, "s_c", client)
        assert again.already_exists and again.positions
        with pytest.raises(ConflictError) as moved:
            await appender.append_async(T, "s_c", [NOTE], expected_prev_chain_hash=None)
        assert moved.value.code == "PREV_CHAIN_HASH_MISMATCH"
        assert moved.value.details["currentPrevChainHash"] == client[-1]["chainHash"]
        key = Idempotency(key="k-1", principal_id="p", endpoint="POST /x")
        once = await appender.append_async(T, "s_i", [NOTE], expected_prev_chain_hash=None, idempotency=key)
        key_again = Idempotency(key="k-1", principal_id="p", endpoint="POST /x")
        replay = await appender.append_async(T, "s_i", [NOTE], expected_prev_chain_hash=None,
                                             idempotency=key_again)
        assert replay.replayed and replay.head_chain_hash == once.head_chain_hash

    asyncio.run(run())
    assert appender.streams.head(T, "s_i").seq == 1  # type: ignore[union-attr]


def test_concurrent_appends_on_one_loop_keep_their_own_outcomes(appender: Appender) -> None:
    """Twenty appends at once on one event loop, two of them to the same empty stream: one of those two wins,
    the other is a conflict; every other append commits."""
    async def run() -> list[Any]:
        calls = [appender.append_async(T, f"s_{i}", [NOTE], expected_prev_chain_hash=None) for i in range(18)]
        calls += [appender.append_async(T, "s_race", [NOTE], expected_prev_chain_hash=None) for _ in range(2)]
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(run())
    assert all(o.first_seq == 1 for o in outcomes[:18])
    race = outcomes[18:]
    assert sum(isinstance(o, ConflictError) for o in race) == 1, race
    assert appender.streams.head(T, "s_race").seq == 1  # type: ignore[union-attr]


def test_an_append_whose_caller_stops_waiting_is_written(appender: Appender) -> None:
    """The caller's task is cancelled once its append has reached the commit: the append is still written (it
    cannot be taken back once handed over, whether or not it has committed yet), and later appends go on.
    (test_group_commit holds the writer to cancel a queued append for certain.)"""
    async def run() -> None:
        task = asyncio.ensure_future(appender.append_async(T, "s_gone", [NOTE], expected_prev_chain_hash=None))
        await asyncio.sleep(0)  # the flow runs on the loop up to its commit, then waits
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # unless it had committed already
            await task
        after = await appender.append_async(T, "s_after", [NOTE], expected_prev_chain_hash=None)
        assert after.first_seq == 1

    asyncio.run(asyncio.wait_for(run(), 30))
    deadline = time.monotonic() + 10
    while appender.streams.head(T, "s_gone") is None:
        assert time.monotonic() < deadline, "the cancelled append was not written"
        time.sleep(0.02)
    assert appender.streams.head(T, "s_gone").seq == 1  # type: ignore[union-attr]
