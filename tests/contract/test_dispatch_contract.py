"""Dispatcher contract, run on SQLite and PostgreSQL: delivery, halt-on-poison, dead/re-arm, lenient skips,
ops verbs, start-from-now, batch fallback, per-instance rows, crash failpoints, metrics and the CLI."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from settlekit.append import Appender
from settlekit.application.consumers import (
    dead_letters,
    disable_consumer,
    enable_consumer,
    get_state,
    list_consumers,
    reset_consumer,
    restart_consumer,
    skip_poison,
)
from settlekit.cli.consumers import consumers_app
from settlekit.dispatch import (
    SHARED_INSTANCE,
    Consumer,
    ConsumerContext,
    ConsumerDead,
    ConsumerNotDead,
    ConsumerNotDisabled,
    ConsumerNotFound,
    ConsumerProcessing,
    DispatchedEvent,
    Dispatcher,
    ErrorPolicy,
    Gap,
)
from settlekit.errors import ConfigurationError, ValidationError
from settlekit.store.consumers import dump_gaps
from settlekit.store.db import Database
from settlekit.store.streams import StoredEvent
from support.failpoints import SimulatedCrash, crash_at

ACTOR = {"type": "system", "id": "test"}


def append(db: Database, stream: str, n: int = 1, etype: str = "THING_HAPPENED", tenant: str = "t1") -> list[int]:
    store = Appender(db)
    head = store.streams.head(tenant, stream)
    items = [{"type": etype, "actor": ACTOR, "payload": {"i": i}} for i in range(n)]
    return store.append(tenant, stream, items, expected_version=head.seq if head else 0).positions


def make_applied(db: Database) -> None:
    with db.transaction() as tx:
        tx.execute(
            "CREATE TABLE applied (consumer TEXT NOT NULL, position BIGINT NOT NULL, stream_id TEXT,"
            " seq BIGINT, PRIMARY KEY (consumer, position))"
        )


def applied(db: Database, consumer: str) -> list[int]:
    with db.read() as tx:
        return [
            int(r[0])
            for r in tx.fetchall("SELECT position FROM applied WHERE consumer = ? ORDER BY position", (consumer,))
        ]


def recording(name: str, seen: list[int], *, fail_at: set[int] | None = None) -> Callable[..., None]:
    """A transactional handler: writes (consumer, position) through ctx.tx, fails on positions in fail_at."""

    def handler(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        ctx.tx.execute(
            "INSERT INTO applied (consumer, position, stream_id, seq) VALUES (?, ?, ?, ?)",
            (name, event.position, event.stream_id, event.seq),
        )
        seen.append(event.position)
        if fail_at and event.position in fail_at:
            raise RuntimeError(f"poison at {event.position}")

    return handler


def dispatcher(db: Database, consumers: list[Consumer], **kw: Any) -> Dispatcher:
    kw.setdefault("registry", CollectorRegistry())
    kw.setdefault("backoff_base", 0.0)
    kw.setdefault("listen", False)
    return Dispatcher(db, consumers, **kw)


def test_delivers_every_event_once_in_order_with_tx_effects(db: Database) -> None:
    make_applied(db)
    positions = append(db, "s1", 3) + append(db, "s2", 2) + append(db, "s1", 2)
    seen: list[int] = []
    d = dispatcher(db, [Consumer("c", recording("c", seen))], batch_size=3)
    d.drain(timeout=10)
    assert seen == positions
    assert applied(db, "c") == positions
    state = get_state(db, "c")
    assert state is not None and state.cursor == positions[-1] and state.status == "idle"
    assert state.pending_gaps == [] and state.attempts == 0
    # the handler sees full stored events; the envelope is parsed lazily
    got: list[StoredEvent] = []
    d2 = dispatcher(db, [Consumer("c2", lambda e, ctx: got.append(e))])
    d2.drain(timeout=10)
    assert [e.position for e in got] == positions
    assert got[0].event["type"] == "THING_HAPPENED" and got[0].event["streamId"] == "s1"
    assert got[0].event_id == got[0].event["id"] and got[0].seq == 1 and got[0].stream_id == "s1"


def test_idle_pass_writes_nothing(db: Database) -> None:
    append(db, "s1", 2)
    d = dispatcher(db, [Consumer("c", lambda e, ctx: None)])
    d.drain(timeout=10)
    before = get_state(db, "c")
    result = d.run_once()
    assert result.by_consumer["c"].outcome == "idle"
    after = get_state(db, "c")
    assert before is not None and after is not None and before.updated_at == after.updated_at


def test_event_type_filter(db: Database) -> None:
    a = append(db, "s1", 2, etype="A")
    b = append(db, "s1", 1, etype="B")
    seen: list[str] = []
    d = dispatcher(db, [Consumer("c", lambda e, ctx: seen.append(e.type), event_types=frozenset({"B"}))])
    d.drain(timeout=10)
    assert seen == ["B"]
    state = get_state(db, "c")
    assert state is not None and state.cursor == b[-1] > a[-1]


def test_poison_halts_retries_with_backoff_then_dead(db: Database) -> None:
    make_applied(db)
    positions = append(db, "s1", 5)
    poison = positions[2]
    seen: list[int] = []
    c = Consumer("c", recording("c", seen, fail_at={poison}), error_policy=ErrorPolicy(max_attempts=3))
    d = dispatcher(db, [c], rearm_cooldown=3600)
    r = d.run_once()
    assert r.processed == 2 and r.failed == 1
    state = get_state(db, "c")
    assert state is not None
    assert state.cursor == positions[1] and state.attempts == 1 and state.status == "idle"
    assert state.last_error is not None and "poison at" in state.last_error
    # the failing event's own writes were rolled back with its savepoint; earlier ones are kept
    assert applied(db, "c") == positions[:2]
    d.run_once()
    d.run_once()
    state = get_state(db, "c")
    assert state is not None and state.status == "dead" and state.attempts == 3
    assert seen == positions[:2] + [poison] * 3
    assert d.run_once().by_consumer["c"].outcome == "dead"
    with pytest.raises(ConsumerDead):
        d.drain(timeout=5)
    assert d.metrics.dead.labels("c", SHARED_INSTANCE)._value.get() == 1


def test_backoff_delays_the_retry(db: Database) -> None:
    positions = append(db, "s1", 1)
    c = Consumer("c", lambda e, ctx: (_ for _ in ()).throw(ValueError("nope")))
    d = dispatcher(db, [c], backoff_base=30.0)
    d.run_once()
    assert d.run_once().by_consumer["c"].outcome == "backoff"
    state = get_state(db, "c")
    assert state is not None and state.attempts == 1 and state.cursor == positions[0] - 1


def test_rearm_after_cooldown_at_most_n_times_then_restart(db: Database) -> None:
    make_applied(db)
    positions = append(db, "s1", 3)
    fail = {positions[1]}
    seen: list[int] = []
    c = Consumer("c", recording("c", seen, fail_at=fail), error_policy=ErrorPolicy(max_attempts=1))
    d = dispatcher(db, [c], rearm_cooldown=0.0, max_rearm_count=2)
    d.run_once()  # fails once → dead
    state = get_state(db, "c")
    assert state is not None and state.status == "dead" and state.rearm_count == 0
    d.run_once()  # re-arm 1, fails again → dead
    d.run_once()  # re-arm 2, fails again → dead
    state = get_state(db, "c")
    assert state is not None and state.status == "dead" and state.rearm_count == 2
    assert d.run_once().by_consumer["c"].outcome == "dead"  # budget spent: stays dead
    assert d.metrics.rearm.labels("c", SHARED_INSTANCE)._value.get() == 2
    assert d.metrics.rearm_exhausted.labels("c", SHARED_INSTANCE)._value.get() == 1
    fail.clear()
    state = restart_consumer(db, "c")
    assert state.status == "idle" and state.rearm_count == 0 and state.cursor == positions[0]
    d.drain(timeout=10)
    assert applied(db, "c") == positions
    with pytest.raises(ConsumerNotDead) as err:
        restart_consumer(db, "c")
    assert err.value.code == "CONSUMER_NOT_DEAD" and err.value.status == 409


def test_lenient_consumer_skips_into_dead_letters(db: Database) -> None:
    make_applied(db)
    positions = append(db, "s1", 4)
    bad = positions[1]
    seen: list[int] = []
    c = Consumer("c", recording("c", seen, fail_at={bad}), error_policy=ErrorPolicy(skip_apply_errors=True))
    d = dispatcher(db, [c])
    d.drain(timeout=10)
    state = get_state(db, "c")
    assert state is not None and state.status == "idle" and state.cursor == positions[-1]
    assert state.skipped_count == 1 and state.attempts == 0
    assert applied(db, "c") == [p for p in positions if p != bad]
    letters = dead_letters(db, "c")
    assert len(letters) == 1
    assert letters[0]["position"] == bad and letters[0]["reason"] == "skip_apply_error"
    assert letters[0]["errorClass"] == "RuntimeError" and "poison" in letters[0]["errorMessage"]
    assert letters[0]["eventType"] == "THING_HAPPENED"
    assert d.metrics.skipped.labels("c", SHARED_INSTANCE, "skip_apply_error")._value.get() == 1


def test_disable_enable(db: Database) -> None:
    positions = append(db, "s1", 2)
    seen: list[int] = []
    d = dispatcher(db, [Consumer("c", lambda e, ctx: seen.append(e.position))])
    d.ensure_registered()
    state = disable_consumer(db, "c")
    assert state.status == "disabled"
    d.run_once()
    assert seen == []
    d.drain(timeout=5)  # disabled consumers do not hold up drain
    with pytest.raises(ConsumerNotDead):
        restart_consumer(db, "c")
    state = enable_consumer(db, "c")
    assert state.status == "idle"
    d.drain(timeout=10)
    assert seen == positions
    with pytest.raises(ConsumerNotDisabled) as err:
        enable_consumer(db, "c")
    assert err.value.code == "CONSUMER_NOT_DISABLED"
    with pytest.raises(ConsumerNotFound) as nf:
        disable_consumer(db, "nope")
    assert nf.value.code == "CONSUMER_NOT_FOUND" and nf.value.status == 404


def test_skip_poison_past_cursor(db: Database) -> None:
    make_applied(db)
    positions = append(db, "s1", 3)
    seen: list[int] = []
    c = Consumer("c", recording("c", seen, fail_at={positions[1]}), error_policy=ErrorPolicy(max_attempts=1))
    d = dispatcher(db, [c], rearm_cooldown=3600)
    d.run_once()
    assert get_state(db, "c").status == "dead"  # type: ignore[union-attr]
    result = skip_poison(db, "c")
    assert result.skipped_position == positions[1]
    assert result.state.status == "idle" and result.state.cursor == positions[1] and result.state.last_error is None
    d.drain(timeout=10)
    assert applied(db, "c") == [positions[0], positions[2]]
    letters = dead_letters(db, "c")
    assert [(x["position"], x["reason"]) for x in letters] == [(positions[1], "operator_skip")]
    # nothing left to skip
    assert skip_poison(db, "c").skipped_position is None


def test_skip_takes_the_lowest_visible_gap_position_first(db: Database) -> None:
    make_applied(db)
    positions = append(db, "s1", 4)
    # a consumer whose cursor passed positions[1] and [2] while they were (then) invisible
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO consumer_state (name, instance_id, last_processed_position, pending_gaps)"
            " VALUES (?, ?, ?, " + ("?::jsonb" if db.dialect == "postgres" else "?") + ")",
            ("c", SHARED_INSTANCE, positions[3], dump_gaps([Gap(positions[1], positions[2], 0)])),
        )
    seen: list[int] = []
    c = Consumer("c", recording("c", seen, fail_at={positions[1]}), error_policy=ErrorPolicy(max_attempts=5))
    d = dispatcher(db, [c])
    d.run_once()
    state = get_state(db, "c")
    assert state is not None and state.attempts == 1 and state.cursor == positions[3]
    assert seen == [positions[1]]  # gap rows come first; the poison halts before positions[2]
    result = skip_poison(db, "c")
    assert result.skipped_position == positions[1]
    assert result.state.cursor == positions[3]
    assert result.state.pending_gaps == [Gap(positions[2], positions[2], 0)]
    d.drain(timeout=10)
    assert applied(db, "c") == [positions[2]]
    state = get_state(db, "c")
    assert state is not None and state.pending_gaps == []


def test_reset_to_position_and_now(db: Database) -> None:
    positions = append(db, "s1", 4)
    seen: list[int] = []
    d = dispatcher(db, [Consumer("c", lambda e, ctx: seen.append(e.position))])
    d.drain(timeout=10)
    state = reset_consumer(db, "c", positions[1])
    assert state.cursor == positions[1]
    d.drain(timeout=10)
    assert seen == positions + positions[2:]
    append(db, "s1", 2)
    state = reset_consumer(db, "c", "now")
    d.drain(timeout=10)
    assert state.cursor == positions[-1] + 2 and len(seen) == 6
    with pytest.raises(ValidationError) as err:
        reset_consumer(db, "c", 10_000)
    assert err.value.code == "CONSUMER_RESET_INVALID"


def test_reset_refused_while_processing(db: Database) -> None:
    append(db, "s1", 1)
    errors: list[BaseException] = []

    def handler(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        def other() -> None:
            try:
                reset_consumer(db, "c", 0)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join(10)
        state = get_state_other_thread(db)
        assert state is not None and state.processing

    d = dispatcher(db, [Consumer("c", handler)])
    d.drain(timeout=15)
    assert len(errors) == 1 and isinstance(errors[0], ConsumerProcessing)
    assert errors[0].code == "CONSUMER_PROCESSING"
    state = get_state(db, "c")
    assert state is not None and not state.processing


def get_state_other_thread(db: Database) -> Any:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(get_state(db, "c")))
    t.start()
    t.join(10)
    return out[0]


def test_start_from_now(db: Database) -> None:
    append(db, "s1", 3)
    seen: list[int] = []
    d = dispatcher(db, [Consumer("c", lambda e, ctx: seen.append(e.position), start_from="now")])
    d.ensure_registered()
    later = append(db, "s1", 2)
    d.drain(timeout=10)
    assert seen == later
    # re-registration never moves an existing cursor
    d.ensure_registered()
    state = get_state(db, "c")
    assert state is not None and state.cursor == later[-1]


def test_batch_handler_and_fallback(db: Database) -> None:
    make_applied(db)
    positions = append(db, "s1", 4)
    batches: list[list[int]] = []
    singles: list[int] = []

    def batch(events: Any, ctx: ConsumerContext) -> None:
        ctx.tx.executemany(
            "INSERT INTO applied (consumer, position) VALUES (?, ?)", [("c", e.position) for e in events]
        )
        batches.append([e.position for e in events])
        if positions[2] in batches[-1]:
            raise RuntimeError("batch refuses")

    def single(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        ctx.tx.execute("INSERT INTO applied (consumer, position) VALUES (?, ?)", ("c", event.position))
        singles.append(event.position)

    d = dispatcher(db, [Consumer("c", single, batch_handler=batch)], batch_size=2)
    d.drain(timeout=10)
    assert batches == [positions[:2], positions[2:]]
    assert singles == positions[2:]  # the failed batch's writes were rolled back, then per-event delivery
    assert applied(db, "c") == positions
    state = get_state(db, "c")
    assert state is not None and state.attempts == 0  # a batch failure is not an attempt


def test_per_instance_rows(db: Database) -> None:
    positions = append(db, "s1", 3)
    seen: dict[str, list[int]] = {"i1": [], "i2": [], "shared": []}

    def make(inst: str) -> Dispatcher:
        return dispatcher(
            db,
            [
                Consumer("cache", lambda e, ctx: seen[ctx.instance_id].append(e.position), delivery="per_instance"),
                Consumer("shared", lambda e, ctx: seen["shared"].append(e.position)),
            ],
            instance_id=inst,
        )

    d1, d2 = make("i1"), make("i2")
    d1.drain(timeout=10)
    d2.drain(timeout=10)
    assert seen == {"i1": positions, "i2": positions, "shared": positions}
    rows = {(p.state.name, p.state.instance_id) for p in list_consumers(db)}
    assert rows == {("cache", "i1"), ("cache", "i2"), ("shared", SHARED_INSTANCE)}
    with pytest.raises(ConsumerNotFound):
        restart_consumer(db, "cache")  # per-instance rows need their instance id
    assert disable_consumer(db, "cache", "i2").status == "disabled"
    with pytest.raises(ConfigurationError):
        Dispatcher(db, [Consumer("x", lambda e, ctx: None, delivery="per_instance")])
    with pytest.raises(ConfigurationError):
        Dispatcher(db, [Consumer("x", lambda e, ctx: None)], instance_id=SHARED_INSTANCE)


@pytest.mark.parametrize("point", ["after_fetch", "after_deliver", "before_commit"])
def test_crash_mid_turn_loses_nothing_and_applies_once(db: Database, point: str) -> None:
    make_applied(db)
    positions = append(db, "s1", 3) + append(db, "s2", 2)
    seen: list[int] = []
    crash_at(f"dispatch.{point}", times=1)
    d = dispatcher(db, [Consumer("c", recording("c", seen))], batch_size=3)
    with pytest.raises(SimulatedCrash):
        d.run_once()
    assert applied(db, "c") == []
    state = get_state(db, "c")
    assert state is not None and state.cursor == 0
    # "restart the process": a fresh dispatcher on the same database
    d2 = dispatcher(db, [Consumer("c", recording("c", seen))], batch_size=3)
    d2.drain(timeout=10)
    assert applied(db, "c") == positions  # PK (consumer, position): a double effect would have failed
    expected_seen = positions[:3] + positions if point != "after_fetch" else positions
    assert seen == expected_seen


def test_list_shows_registered_never_run_and_lag(db: Database) -> None:
    positions = append(db, "s1", 3)
    d = dispatcher(db, [Consumer("a", lambda e, ctx: None)])
    d.drain(timeout=10)
    append(db, "s1", 2)
    rows = {p.state.name: p for p in list_consumers(db, registered=["a", "b"])}
    assert rows["a"].high_water_mark == positions[-1] + 2 and rows["a"].lag == 2 and rows["a"].registered
    assert rows["a"].lag_seconds >= 0
    assert rows["b"].state.status == "never-run" and rows["b"].lag == positions[-1] + 2
    d.run_once()
    assert d.metrics.lag_events.labels("a", SHARED_INSTANCE)._value.get() == 0
    assert d.metrics.processed.labels("a", SHARED_INSTANCE)._value.get() == 5


def test_cli(db: Database) -> None:
    append(db, "s1", 2)
    d = dispatcher(db, [Consumer("c", lambda e, ctx: None), Consumer("other", lambda e, ctx: None)])
    d.drain(timeout=10)
    runner = CliRunner()
    out = runner.invoke(consumers_app, ["list", "--db", db.url, "--json"])
    assert out.exit_code == 0, out.output
    listed = json.loads(out.stdout)
    assert {x["name"] for x in listed} == {"c", "other"}
    assert all(x["lag"] == 0 and x["status"] == "idle" for x in listed)
    out = runner.invoke(consumers_app, ["list", "--db", db.url])
    assert out.exit_code == 0 and "other" in out.stdout
    out = runner.invoke(consumers_app, ["disable", "c", "--db", db.url, "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["status"] == "disabled"
    out = runner.invoke(consumers_app, ["restart", "c", "--db", db.url])
    assert out.exit_code == 1 and "CONSUMER_NOT_DEAD" in out.output
    out = runner.invoke(consumers_app, ["enable", "c", "--db", db.url, "--json"])
    assert json.loads(out.stdout)["status"] == "idle"
    out = runner.invoke(consumers_app, ["reset", "c", "--db", db.url, "--to", "0", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["lastProcessedPosition"] == 0
    out = runner.invoke(consumers_app, ["skip", "c", "--db", db.url, "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["skippedPosition"] == 1
    out = runner.invoke(consumers_app, ["status", "c", "--db", db.url])
    assert out.exit_code == 0 and "lastProcessedPosition" in out.stdout
    out = runner.invoke(consumers_app, ["status", "ghost", "--db", db.url])
    assert out.exit_code == 1 and "CONSUMER_NOT_FOUND" in out.output


def test_background_thread_wakes_on_append(db: Database) -> None:
    got = threading.Event()
    seen: list[int] = []

    def handler(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        seen.append(event.position)
        got.set()

    d = Dispatcher(db, [Consumer("c", handler)], registry=CollectorRegistry(), poll_interval=0.05)
    d.start()
    try:
        positions = append(db, "s1", 1)
        assert got.wait(5)
    finally:
        d.stop()
    assert seen == positions


def test_skip_takes_the_failed_event_not_a_gap_position_seen_since(db: Database) -> None:
    """The consumer died on an event past its cursor; a pending-gap position becomes visible afterwards (its
    writer committed late). Skip takes the event that failed, not the gap position (before, the lowest visible
    gap position was dead-lettered and the poison stayed): the next turn delivers the gap's event."""
    make_applied(db)
    positions = append(db, "s1", 4)
    with db.transaction() as tx:  # a consumer whose cursor passed positions[0] while it was invisible
        tx.execute(
            "INSERT INTO consumer_state (name, instance_id, last_processed_position) VALUES (?, ?, ?)",
            ("c", SHARED_INSTANCE, positions[1]),
        )
    seen: list[int] = []
    c = Consumer("c", recording("c", seen, fail_at={positions[2]}), error_policy=ErrorPolicy(max_attempts=1))
    d = dispatcher(db, [c], rearm_cooldown=3600)
    d.run_once()
    state = get_state(db, "c")
    assert state is not None and state.status == "dead" and state.cursor == positions[1]
    with db.transaction() as tx:  # positions[0] was in flight at the halt and is visible now
        tx.execute("UPDATE consumer_state SET pending_gaps = " + ("?::jsonb" if db.dialect == "postgres" else "?")
                   + " WHERE name = ?", (dump_gaps([Gap(positions[0], positions[0], 0)]), "c"))
    result = skip_poison(db, "c")
    assert result.skipped_position == positions[2]
    assert result.state.cursor == positions[2]
    assert result.state.pending_gaps == [Gap(positions[0], positions[0], 0)]
    assert [(x["position"], x["reason"]) for x in dead_letters(db, "c")] == [(positions[2], "operator_skip")]
    d.drain(timeout=10)
    assert applied(db, "c") == [positions[0], positions[3]]


def test_skip_after_a_late_writer_commits_on_postgres(pg_url: str) -> None:
    """The same with a real writer in flight: its position is a pending gap when the consumer dies on the
    poison, and it commits before the skip."""
    import psycopg

    from settlekit.store.db import connect

    db = connect(pg_url)
    try:
        make_applied(db)
        append(db, "s0", 1)
        writer = psycopg.connect(pg_url)
        writer.execute("SELECT pg_current_xact_id()")
        row = writer.execute(
            "INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash,"
            " chain_hash, event_json, txid, batch_id) VALUES ('t1', 'x', 'late', 1, 'evt_late', 'THING_HAPPENED',"
            " '2026-01-01T00:00:00.000Z', 'h', 'c', '{}', pg_current_xact_id(), gen_random_uuid())"
            " RETURNING position").fetchone()
        assert row is not None
        late = int(row[0])
        positions = append(db, "s1", 3)
        poison = positions[1]
        seen: list[int] = []
        c = Consumer("c", recording("c", seen, fail_at={poison}), error_policy=ErrorPolicy(max_attempts=1))
        d = dispatcher(db, [c], rearm_cooldown=3600)
        d.run_once()
        state = get_state(db, "c")
        assert state is not None and state.status == "dead"
        assert any(g.lo <= late <= g.hi for g in state.pending_gaps)
        writer.commit()
        writer.close()
        assert skip_poison(db, "c").skipped_position == poison
        d.drain(timeout=10)
        assert late in applied(db, "c") and poison not in applied(db, "c")
    finally:
        db.close()
