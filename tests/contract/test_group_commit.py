"""Group commit (store.events.GroupCommitter), on both backends: appends written together keep their own outcomes
(one stream's conflict or failure never fails another), and nothing is answered or half-written when the group
does not commit."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from settlekit.append import Appender
from settlekit.errors import ConflictError, DatabaseUnavailableError, OverloadedError
from settlekit.events.canonical import storable_json
from settlekit.events.envelope import Event, Signer, finalize_chain, make_draft
from settlekit.store.db import Database, Tx
from settlekit.store.events import (
    CommitBatch,
    Committed,
    DuplicateKey,
    EventRecorder,
    GroupCommitter,
    HeadMismatch,
)
from settlekit.store.streams import Streams
from support.failpoints import SimulatedCrash, crash_at

T = "tenant_a"
ACTOR = {"type": "system", "id": "proxy"}


def _events(stream_id: str, n: int = 1, prev: str | None = None) -> list[Event]:
    drafts = [make_draft(stream_id=stream_id, type="NOTE", actor=ACTOR, payload={"n": i}) for i in range(n)]
    return finalize_chain(drafts, prev)


def _batch(stream_id: str, events: list[Event], prev: str | None = None) -> CommitBatch:
    return CommitBatch(tenant_id=T, stream_id=stream_id, stream_type="generic", prev_chain_hash=prev,
                       expected_version=None, events=events, jsons=[storable_json(e) for e in events],
                       snapshot_json=None, batch_id=str(uuid.uuid4()))


def _group(db: Database) -> Any:
    group = EventRecorder(db, group_commit=True).group
    assert group is not None
    return group


def test_a_group_keeps_each_outcome_its_own(db: Database) -> None:
    """Ten streams in one group, one of them on a head that moved: that one mismatches, the others commit."""
    streams = Streams(db)
    existing = _events("s_conflict")
    EventRecorder(db).commit(_batch("s_conflict", existing))
    batches = [_batch(f"s_{i}", _events(f"s_{i}")) for i in range(10)]
    batches[4] = _batch("s_conflict", _events("s_conflict"))  # expects an empty stream: it is not
    outcomes = _group(db).write_group([(b, None) for b in batches])
    assert outcomes[4] == HeadMismatch(1, existing[0]["chainHash"])
    for i, outcome in enumerate(outcomes):
        if i != 4:
            assert isinstance(outcome, Committed) and outcome.base_seq == 0, outcome
            assert streams.read_stream(T, f"s_{i}") == list(batches[i].events)
    assert streams.read_stream(T, "s_conflict") == existing


def test_a_group_applies_its_appends_in_queue_order(db: Database) -> None:
    """Two appends to one stream in one group, the second linked to the first: both commit, in order (one-event
    appends go in one statement on PostgreSQL); with a two-event append in the group too (sent one by one)."""
    streams = Streams(db)
    for extra in (None, 2):
        first = _events(f"s_chain_{extra}")
        second = _events(f"s_chain_{extra}", prev=first[0]["chainHash"])
        group = [(_batch(f"s_chain_{extra}", first), None),
                 (_batch(f"s_other_{extra}", _events(f"s_other_{extra}")), None),
                 (_batch(f"s_chain_{extra}", second, prev=first[0]["chainHash"]), None)]
        if extra:
            group.append((_batch(f"s_pair_{extra}", _events(f"s_pair_{extra}", n=extra)), None))
        outcomes = _group(db).write_group(group)
        assert [o.base_seq for o in outcomes if isinstance(o, Committed)] == [0, 0, 1] + ([0] if extra else [])
        assert [e["chainHash"] for e in streams.read_stream(T, f"s_chain_{extra}")] == [
            first[0]["chainHash"], second[0]["chainHash"]]
        with db.read() as tx:
            positions = [p for o in outcomes if isinstance(o, Committed) for p in o.positions]
            stored = [int(r[0]) for r in tx.fetchall(
                "SELECT position FROM events WHERE tenant_id = ? AND stream_id LIKE ? ORDER BY position",
                (T, f"s_%_{extra}"))]
        assert sorted(positions) == stored


def test_a_failing_append_fails_alone(db: Database) -> None:
    """A uniqueness violation (of an event, of a follow-up write) and an error in one append's follow-up writes
    roll the group back; the group is written again one append at a time, so only those fail and the others
    commit once."""
    streams = Streams(db)
    taken = _events("s_taken")
    EventRecorder(db).commit(_batch("s_taken", taken))
    copy = _batch("s_copy", list(taken))  # the same event ids in another stream: DuplicateKey

    def broken(tx: Tx, base_seq: int, positions: list[int]) -> None:
        raise RuntimeError("domain write failed")

    def duplicate_row(tx: Tx, base_seq: int, positions: list[int]) -> None:
        tx.execute("INSERT INTO schema_migrations (name) SELECT min(name) FROM schema_migrations")

    calls: list[int] = []

    def counted(tx: Tx, base_seq: int, positions: list[int]) -> None:
        calls.append(base_seq)

    group = [(_batch("s_a", _events("s_a")), counted), (copy, None), (_batch("s_b", _events("s_b")), broken),
             (_batch("s_c", _events("s_c")), None), (_batch("s_d", _events("s_d")), duplicate_row)]
    outcomes = _group(db).write_group(group)
    assert isinstance(outcomes[4], DuplicateKey)  # a follow-up write broke a uniqueness rule
    assert streams.head(T, "s_d") is None
    assert isinstance(outcomes[0], Committed) and isinstance(outcomes[3], Committed)
    assert isinstance(outcomes[1], DuplicateKey) and outcomes[1].kind == "event_id"
    assert isinstance(outcomes[2], RuntimeError)
    assert calls and set(calls) == {0}  # once alone, perhaps also in the rolled-back group before
    assert streams.read_stream(T, "s_a") == list(group[0][0].events)
    assert streams.read_stream(T, "s_c") == list(group[3][0].events)
    assert streams.head(T, "s_copy") is None and streams.head(T, "s_b") is None
    with db.read() as tx:
        assert tx.scalar("SELECT count(*) FROM events WHERE tenant_id = ?", (T,)) == 3


def test_a_crash_in_the_middle_of_a_group_answers_nothing_and_writes_nothing(db: Database) -> None:
    crash_at("append.group_commit", subject=2)  # after the third append of the group is written
    batches = [_batch(f"s_{i}", _events(f"s_{i}")) for i in range(5)]
    with pytest.raises(SimulatedCrash):
        _group(db).write_group([(b, None) for b in batches])
    with db.read() as tx:
        assert tx.scalar("SELECT count(*) FROM events") == 0
        assert tx.scalar("SELECT count(*) FROM streams") == 0


def test_a_crash_fails_every_waiting_caller(db: Database) -> None:
    """Through the writer thread: every append of the crashed group gets the crash, none a result."""
    recorder = EventRecorder(db, group_commit=True)
    assert recorder.group is not None
    release = threading.Event()
    crash_at("append.group_commit", subject=1)
    gate = threading.Lock()
    gate.acquire()
    results: dict[int, Any] = {}

    def first_append() -> None:
        # holds the writer inside its first (one-append) group until the others have queued
        def wait(tx: Tx, base_seq: int, positions: list[int]) -> None:
            release.set()
            gate.acquire()

        results[-1] = recorder.commit(_batch("s_first", _events("s_first")), wait)

    def append(i: int) -> None:
        try:
            results[i] = recorder.commit(_batch(f"s_{i}", _events(f"s_{i}")))
        except BaseException as exc:  # the crash reaches the caller
            results[i] = exc

    threads = [threading.Thread(target=first_append)]
    threads[0].start()
    assert release.wait(10)
    threads += [threading.Thread(target=append, args=(i,)) for i in range(4)]
    for t in threads[1:]:
        t.start()
    while _queued(recorder) < 4:
        threading.Event().wait(0.01)
    gate.release()
    for t in threads:
        t.join(10)
    recorder.close()
    assert isinstance(results[-1], Committed)
    assert all(isinstance(results[i], SimulatedCrash) for i in range(4)), results
    with db.read() as tx:
        assert tx.scalar("SELECT count(*) FROM events") == 1


def _queued(recorder: EventRecorder) -> int:
    assert recorder.group is not None
    return recorder.group._queue.qsize()


def test_concurrent_appends_to_many_streams_with_one_conflict(db: Database) -> None:
    """Through the append use case with group commit: 24 threads append to 24 streams at once, two of them to
    the same new stream; exactly one of those two wins, every other append succeeds."""
    appender = Appender(db, server_signer=Signer.generate(), group_commit=True)
    barrier = threading.Barrier(24)
    outcomes: dict[int, Any] = {}

    def append(i: int) -> None:
        stream = "s_shared" if i < 2 else f"s_{i}"
        draft = {"type": "NOTE", "actor": ACTOR, "payload": {"i": i}}
        barrier.wait()
        try:
            outcomes[i] = appender.append(T, stream, [draft], expected_prev_chain_hash=None)
        except ConflictError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=append, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    appender.close()
    shared = [outcomes[0], outcomes[1]]
    assert sum(isinstance(o, ConflictError) for o in shared) == 1
    assert all(not isinstance(outcomes[i], ConflictError) for i in range(2, 24)), outcomes
    streams = Streams(db)
    for i in range(2, 24):
        assert [e["chainHash"] for e in streams.read_stream(T, f"s_{i}")] == [outcomes[i].head_chain_hash]
    assert len(streams.read_stream(T, "s_shared")) == 1


def test_concurrent_groups_post_to_the_same_accounts_without_deadlock(db: Database) -> None:
    """Two group committers (two API processes) write groups whose appends post to the same accounts in opposite
    orders, at the same time: every append commits (the ledger rows of a group are written by one statement that
    takes the accounts' rows in one order), and the balances are the sums."""
    from settlekit.ledger import accounts as A
    from settlekit.ledger.postings import make_entry
    from settlekit.store import ledger as ledger_rows

    pairs = [(A.CASH, A.CUSTOMER_ESCROW), (A.PLATFORM_REVENUE, A.OPERATOR_PAYABLE)]
    rounds = 25
    failures: list[BaseException] = []

    def posting(stream: str, accounts: tuple[str, str], amount: int) -> Any:
        def after(tx: Tx, base_seq: int, positions: list[int]) -> None:
            event_id = streams_events[stream]
            entry = make_entry(f"jnl_{event_id}", "2026-05-01T00:00:00.000Z", "m", [(accounts[0], amount),
                                                                                   (accounts[1], -amount)])
            ledger_rows.write_entries(tx, T, stream, [{"eventId": event_id, "eventType": "NOTE", "entry": entry}],
                                      [], {event_id: base_seq + 1}, {event_id: positions[0]})
        return after

    streams_events: dict[str, str] = {}

    def writer(side: int) -> None:
        group = _group(db)
        try:
            for n in range(rounds):
                batch = []
                for k in (0, 1) if side == 0 else (1, 0):
                    stream = f"s_dl_{side}_{n}_{k}"
                    events = _events(stream)
                    streams_events[stream] = events[0]["id"]
                    batch.append((_batch(stream, events), posting(stream, pairs[k], 100 + k)))
                outcomes = group.write_group(batch)
                failures.extend(o for o in outcomes if isinstance(o, BaseException))
        except BaseException as exc:  # the thread's failure is the test's
            failures.append(exc)

    deadlocks_before = _deadlocks(db)
    threads = [threading.Thread(target=writer, args=(side,)) for side in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []
    assert _deadlocks(db) == deadlocks_before  # not even one resolved by writing a group again alone
    with db.read() as tx:
        balances = dict(tx.fetchall("SELECT account_id, balance_cents FROM ledger_balances WHERE tenant_id = ?",
                                    (T,)))
    total = 2 * rounds
    assert balances == {A.CASH: 100 * total, A.CUSTOMER_ESCROW: -100 * total,
                        A.PLATFORM_REVENUE: 101 * total, A.OPERATOR_PAYABLE: -101 * total}


def _deadlocks(db: Database) -> int | None:
    """PostgreSQL's count of deadlocks detected in this database (None on SQLite, whose writers take turns)."""
    if db.dialect != "postgres":
        return None
    with db.read() as tx:
        tx.execute("SELECT pg_stat_clear_snapshot()")
        return int(tx.scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))


def test_an_append_rolled_back_by_the_server_is_tried_again(db: Database) -> None:
    """PostgreSQL: a transaction the server rolls back for a deadlock committed nothing, so the append runs again
    (its follow-up writes too) and commits once."""
    if db.dialect != "postgres":
        return
    import psycopg.errors

    calls: list[int] = []

    def deadlocked_once(tx: Tx, base_seq: int, positions: list[int]) -> None:
        calls.append(base_seq)
        if len(calls) == 1:
            raise psycopg.errors.DeadlockDetected("deadlock detected (simulated)")

    events = _events("s_retried")
    outcome = EventRecorder(db).commit(_batch("s_retried", events), deadlocked_once)
    assert isinstance(outcome, Committed) and calls == [0, 0]
    assert Streams(db).read_stream(T, "s_retried") == events


def test_a_caller_that_stops_waiting_fails_nobody_in_its_group(db: Database) -> None:
    """Two appends queued on an event loop while the writer is busy, the first one's caller cancelled: both are
    written in the next group, and the second one's caller gets its outcome (a cancelled wait never breaks the
    writer's answers to the rest of its group)."""
    recorder = EventRecorder(db, group_commit=True)
    release = threading.Event()
    gate = threading.Lock()
    gate.acquire()

    def hold(tx: Tx, base_seq: int, positions: list[int]) -> None:
        release.set()
        gate.acquire()

    holder = threading.Thread(target=recorder.commit, args=(_batch("s_hold", _events("s_hold")), hold))
    holder.start()
    assert release.wait(10)

    async def run() -> Any:
        gone = asyncio.ensure_future(recorder.commit_async(_batch("s_gone", _events("s_gone"))))
        kept = asyncio.ensure_future(recorder.commit_async(_batch("s_kept", _events("s_kept"))))
        while _queued(recorder) < 2:
            await asyncio.sleep(0.01)
        gone.cancel()
        await asyncio.wait([gone], timeout=10)  # the cancellation reaches the queued append's future
        assert gone.cancelled()
        gate.release()
        return await asyncio.wait_for(kept, 10)

    kept = asyncio.run(run())
    holder.join(10)
    recorder.close()
    assert isinstance(kept, Committed)
    streams = Streams(db)
    assert [streams.head(T, s) is not None for s in ("s_hold", "s_gone", "s_kept")] == [True, True, True]


def test_an_append_queued_while_the_writer_stops_is_written(db: Database) -> None:
    """close() racing with submit(): an append queued just as the writer takes its stop signal is written (by
    that writer before it leaves, or by a new one), never left waiting behind a writer that has gone."""
    recorder = EventRecorder(db, group_commit=True)
    group = recorder.group
    assert group is not None
    for i in range(60):
        closing = threading.Thread(target=group.close)
        closing.start()
        future = group.submit(_batch(f"s_{i}", _events(f"s_{i}")), None)
        assert isinstance(future.result(timeout=10), Committed)
        closing.join(10)
    recorder.close()


def test_appends_beyond_the_queue_bound_are_refused_at_once_and_write_nothing(db: Database) -> None:
    """With the writer held inside a commit and `max_queued` appends waiting, one more is OverloadedError at once
    (nothing queued, nothing written); the ones admitted are all written once the writer goes on."""
    recorder = EventRecorder(db, group_commit=True, max_queued=3)
    group = recorder.group
    assert group is not None
    entered = threading.Event()
    gate = threading.Event()

    def hold(tx: Tx, base_seq: int, positions: list[int]) -> None:
        entered.set()
        assert gate.wait(60), "hang guard"

    held = group.submit(_batch("s_held", _events("s_held")), hold)
    assert entered.wait(60), "hang guard"
    queued = [group.submit(_batch(f"s_q{i}", _events(f"s_q{i}")), None) for i in range(2)]
    assert group.pending == 3
    for attempt in range(5):
        with pytest.raises(OverloadedError) as refused:
            group.submit(_batch(f"s_refused{attempt}", _events(f"s_refused{attempt}")), None)
        assert refused.value.status == 503 and refused.value.details["limit"] == 3
    assert group.pending == 3
    gate.set()
    for future in (held, *queued):
        assert isinstance(future.result(timeout=60), Committed)
    assert group.pending == 0
    recorder.close()
    streams = Streams(db)
    assert [streams.head(T, s) is not None for s in ("s_held", "s_q0", "s_q1")] == [True, True, True]
    assert all(streams.head(T, f"s_refused{attempt}") is None for attempt in range(5))
    # the bound is on what waits, not on what was ever written: room again, appends are taken again
    assert isinstance(recorder.commit(_batch("s_after", _events("s_after"))), Committed)
    recorder.close()


class _Unreachable:
    """A backend whose database cannot be reached: every write is DatabaseUnavailableError; counts the tries."""

    def __init__(self) -> None:
        self.tries = 0

    def commit(self, db: Any, batch: CommitBatch, after: Any) -> Any:
        self.tries += 1
        raise DatabaseUnavailableError(cause="test")

    def write_group(self, db: Any, group: Any, before_commit: Any) -> Any:
        self.tries += 1
        raise DatabaseUnavailableError(cause="test")


def test_a_group_that_cannot_reach_the_database_is_not_tried_again_one_by_one(db: Database) -> None:
    """Every append of the group gets DatabaseUnavailableError after ONE try: a failure no append is to blame for
    is not written again one append per transaction (each would wait for the database again)."""
    backend = _Unreachable()
    group = GroupCommitter(db, backend)
    outcomes = None
    with pytest.raises(DatabaseUnavailableError):
        outcomes = group.write_group([(_batch(f"s_{i}", _events(f"s_{i}")), None) for i in range(10)])
    assert outcomes is None and backend.tries == 1


def test_appends_whose_group_failed_no_longer_count_against_the_bound(db: Database) -> None:
    """A group answered with an error (here the database cannot be reached) frees its place in the bound like a
    written one: failures in a row never leave the committer refusing every append with OverloadedError."""
    backend = _Unreachable()
    group = GroupCommitter(db, backend, max_queued=2)
    for attempt in range(5):
        futures = [group.submit(_batch(f"s_{attempt}_{i}", _events(f"s_{attempt}_{i}")), None) for i in range(2)]
        for future in futures:
            with pytest.raises(DatabaseUnavailableError):
                future.result(timeout=60)
        assert group.pending == 0, attempt
    assert backend.tries >= 5
    group.close()


def test_appends_submitted_from_an_event_loop_get_their_own_outcomes_there(db: Database) -> None:
    """submit_async: appends of one loop written in a group each get their outcome on the loop (the writer hands
    them over in one call), a head mismatch and a duplicate event id included; a waiter cancelled meanwhile is
    skipped and its append written all the same."""
    recorder = EventRecorder(db, group_commit=True)
    group = recorder.group
    assert group is not None
    existing = _events("s_loop_conflict")
    EventRecorder(db).commit(_batch("s_loop_conflict", existing))
    duplicate = _events("s_loop_dup")

    async def scenario() -> list[Any]:
        futures = [group.submit_async(_batch(f"s_loop_{i}", _events(f"s_loop_{i}")), None) for i in range(5)]
        futures.append(group.submit_async(_batch("s_loop_conflict", _events("s_loop_conflict")), None))
        futures.append(group.submit_async(_batch("s_loop_dup", duplicate), None))
        futures.append(group.submit_async(_batch("s_loop_dup2", [{**duplicate[0], "streamId": "s_loop_dup2"}]),
                                          None))
        abandoned = group.submit_async(_batch("s_loop_abandoned", _events("s_loop_abandoned")), None)
        abandoned.cancel()
        return await asyncio.gather(*futures, return_exceptions=True)

    try:
        outcomes = asyncio.run(scenario())
    finally:
        recorder.close()
    assert all(isinstance(o, Committed) for o in outcomes[:5]), outcomes
    assert outcomes[5] == HeadMismatch(1, existing[0]["chainHash"])
    assert isinstance(outcomes[6], Committed) != isinstance(outcomes[7], Committed)  # one id, one of the two
    assert isinstance(outcomes[6], DuplicateKey) or isinstance(outcomes[7], DuplicateKey), outcomes
    assert Streams(db).head(T, "s_loop_abandoned") is not None


class _CountingBackend:
    """The dialect's writer, recording the size of each group it writes; `gate` holds the writes while clear
    (`entered` is set once one waits there)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.sizes: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def commit(self, db: Database, batch: CommitBatch, after: Any) -> Any:
        self.entered.set()
        assert self.gate.wait(30)
        self.sizes.append(1)
        return self.inner.commit(db, batch, after)

    def write_group(self, db: Database, group: Any, before_commit: Any) -> Any:
        self.entered.set()
        assert self.gate.wait(30)
        self.sizes.append(len(group))
        return self.inner.write_group(db, group, before_commit)


def test_the_writer_waits_for_a_group_only_while_appends_come_concurrently(db: Database) -> None:
    """After a group of more than one append the writer waits its window for more (an append that comes then
    joins the group); after an append that came alone it writes the next one at once."""
    backend = _CountingBackend(db.family.events)
    committer = GroupCommitter(db, backend, window=0.05)
    pauses: list[float] = []
    arrivals: list[Any] = []
    futures: list[Any] = []

    def pause(seconds: float) -> None:  # the window: an append comes meanwhile, if one is due
        pauses.append(seconds)
        if arrivals:
            futures.append(committer.submit(*arrivals.pop()))

    committer.pause = pause

    def append(stream_id: str) -> tuple[CommitBatch, None]:
        return _batch(stream_id, _events(stream_id)), None

    backend.gate.clear()
    futures.append(committer.submit(*append("w_a")))
    assert backend.entered.wait(30)  # the writer holds A, alone, at the gate
    futures += [committer.submit(*append("w_b")), committer.submit(*append("w_c"))]
    backend.gate.set()
    for f in futures:
        f.result(30)
    assert backend.sizes == [1, 2] and pauses == []  # B and C queued while A was written: no wait for them
    arrivals.append(append("w_e"))
    futures.append(committer.submit(*append("w_d")))
    for f in futures:
        f.result(30)
    assert backend.sizes == [1, 2, 2] and pauses == [0.05]  # E came in D's window: one group
    committer.submit(*append("w_f")).result(30)  # after a group of two: a window, nobody came
    committer.submit(*append("w_g")).result(30)  # after an append alone: no window
    assert backend.sizes == [1, 2, 2, 1, 1] and pauses == [0.05, 0.05]
    assert all(isinstance(f.result(), Committed) for f in futures)
    committer.close()
