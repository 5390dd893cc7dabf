"""Operator verbs on consumer state rows (05-dispatcher.md §10). Consumers are code; these work on the rows (of
one instance of a consumer: `SHARED_INSTANCE` unless the consumer runs per instance).

Every mutating call locks the one (name, instance_id) row with a blocking FOR UPDATE (so it never races a live
turn), validates the precondition and returns the state after the change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from settlekit.dispatch.gaps import holes, merge, remove_position
from settlekit.dispatch.model import (
    SHARED_INSTANCE,
    ConsumerNotDead,
    ConsumerNotDisabled,
    ConsumerNotFound,
    ConsumerProcessing,
    failed_position,
)
from settlekit.errors import SettlekitError, ValidationError
from settlekit.store.consumers import ConsumerRepository, ConsumerRowLocked, ConsumerState, Gap
from settlekit.store.db import Database, Tx

__all__ = ["RESET_HOLE_WINDOW", "SHARED_INSTANCE", "ConsumerProgress", "ConsumerState", "SkipResult", "dead_letters",
           "disable_consumer", "enable_consumer", "get_state", "list_consumers", "require_state", "reset_consumer",
           "restart_consumer", "skip_poison", "wait_for"]


@dataclass
class ConsumerProgress:
    state: ConsumerState
    high_water_mark: int
    lag: int
    lag_seconds: float
    registered: bool | None

    def to_json(self) -> dict[str, Any]:
        out = self.state.to_json()
        out.update(
            highWaterMark=self.high_water_mark,
            lag=self.lag,
            lagSeconds=round(self.lag_seconds, 3),
            pendingGapPositions=self.state.pending_gap_positions,
            registered=self.registered,
        )
        return out


@dataclass
class SkipResult:
    state: ConsumerState
    skipped_position: int | None


def _not_found(name: str, instance_id: str) -> ConsumerNotFound:
    hint = "" if instance_id != SHARED_INSTANCE else " (per-instance consumers need --instance-id)"
    return ConsumerNotFound(
        f"consumer {name!r} has no state row for instance {instance_id!r}{hint}",
        consumer=name,
        instanceId=instance_id,
    )


def _processing(name: str, instance_id: str) -> ConsumerProcessing:
    return ConsumerProcessing(
        f"consumer {name!r} (instance {instance_id!r}) is in a turn right now; retry",
        consumer=name,
        instanceId=instance_id,
    )


def _locked(repo: ConsumerRepository, tx: Tx, name: str, instance_id: str, *, nowait: bool = False) -> ConsumerState:
    try:
        got = repo.read_state(tx, name, instance_id, "nowait" if nowait else "wait")
    except ConsumerRowLocked:
        raise _processing(name, instance_id) from None
    if got is None:
        raise _not_found(name, instance_id)
    return got[0]


def _reread(repo: ConsumerRepository, tx: Tx, name: str, instance_id: str) -> ConsumerState:
    got = repo.read_state(tx, name, instance_id)
    assert got is not None
    return got[0]


def get_state(db: Database, name: str, instance_id: str = SHARED_INSTANCE) -> ConsumerState | None:
    """The row plus a `processing` flag (a turn holds its lock right now), or None."""
    return ConsumerRepository(db).current(name, instance_id)


def require_state(db: Database, name: str, instance_id: str = SHARED_INSTANCE) -> ConsumerState:
    state = get_state(db, name, instance_id)
    if state is None:
        raise _not_found(name, instance_id)
    return state


def list_consumers(db: Database, registered: Sequence[str] | None = None) -> list[ConsumerProgress]:
    """Every state row with high-water mark and lag; registered names without a row appear as `never-run`.

    With `registered` given, rows of other names are flagged `registered=False` (stale); without it
    (the CLI: consumers live in code) `registered` is None.
    """
    repo = ConsumerRepository(db)
    with db.read() as tx:
        hwm = repo.high_water_mark(tx)
        states = repo.list_states(tx)
        busy = repo.processing_keys(tx, [(s.name, s.instance_id) for s, _ in states])
    known = set(registered) if registered is not None else None
    out: list[ConsumerProgress] = []
    for state, lag_seconds in states:
        state.processing = (state.name, state.instance_id) in busy
        out.append(
            ConsumerProgress(
                state,
                hwm,
                max(0, hwm - state.cursor),
                lag_seconds,
                None if known is None else state.name in known,
            )
        )
    seen = {s.name for s, _ in states}
    for name in registered or ():
        if name not in seen:
            placeholder = ConsumerState(
                name=name,
                instance_id=SHARED_INSTANCE,
                status="never-run",
                cursor=0,
                attempts=0,
                rearm_count=0,
                pending_gaps=[],
                last_error=None,
                skipped_count=0,
                updated_at="",
            )
            out.append(ConsumerProgress(placeholder, hwm, hwm, 0.0, True))
    return out


def _write(repo: ConsumerRepository, tx: Tx, state: ConsumerState, **changes: Any) -> None:
    for key, value in changes.items():
        setattr(state, key, value)
    repo.write_state(tx, state)


def _reset(
    db: Database,
    name: str,
    instance_id: str,
    status: str,
    precondition: Callable[[ConsumerState], None] | None = None,
) -> ConsumerState:
    """Under the consumer's row lock: check `precondition` (it raises to refuse), then set `status` and clear
    the attempts, the last error and the re-arm count."""
    repo = ConsumerRepository(db)
    with db.transaction() as tx:
        state = _locked(repo, tx, name, instance_id)
        if precondition is not None:
            precondition(state)
        _write(repo, tx, state, status=status, attempts=0, last_error=None, rearm_count=0)
        return _reread(repo, tx, name, instance_id)


def _only_from(
    name: str, required: str, refusal: type[SettlekitError], rule: str
) -> Callable[[ConsumerState], None]:
    """A `_reset` precondition: refuse with `refusal` unless the consumer is `required`; `rule` ends the message."""

    def check(state: ConsumerState) -> None:
        if state.status != required:
            raise refusal(
                f"consumer {name!r} is {state.status}, not {required}; {rule}",
                consumer=name,
                consumerStatus=state.status,
            )

    return check


def restart_consumer(db: Database, name: str, instance_id: str = SHARED_INSTANCE) -> ConsumerState:
    """dead → idle, keeping the cursor and gaps (the next turn retries the poison event)."""
    rule = "restart only revives a dead consumer (use enable for a disabled one)"
    return _reset(db, name, instance_id, "idle", _only_from(name, "dead", ConsumerNotDead, rule))


def disable_consumer(db: Database, name: str, instance_id: str = SHARED_INSTANCE) -> ConsumerState:
    return _reset(db, name, instance_id, "disabled")


def enable_consumer(db: Database, name: str, instance_id: str = SHARED_INSTANCE) -> ConsumerState:
    rule = "enable only applies to a disabled consumer (use restart for a dead one)"
    return _reset(db, name, instance_id, "idle", _only_from(name, "disabled", ConsumerNotDisabled, rule))


def skip_poison(db: Database, name: str, instance_id: str = SHARED_INSTANCE, *, tx: Tx | None = None) -> SkipResult:
    """Skip the event blocking the consumer: the one its last handler failure was on, while that one is still
    to be delivered (a pending gap or past the cursor); else the lowest visible pending-gap position
    (halt-on-poison walks gaps first), else the next visible position after the cursor. A gap position that
    became visible after the failure is not the poison: it is delivered by the next turn. Writes an
    `operator_skip` dead letter. In `tx` when given (the caller commits), else in a transaction of its own."""
    if tx is None:
        with db.transaction() as own:
            return skip_poison(db, name, instance_id, tx=own)
    repo = ConsumerRepository(db)
    state = _locked(repo, tx, name, instance_id)
    position = _poison(state)
    if position is None:
        position = repo.smallest_visible_in(tx, state.pending_gaps)
    if position is not None and position <= state.cursor:
        gaps = remove_position(state.pending_gaps, position)
        cursor = state.cursor
    else:
        if position is None:
            position = repo.next_position_after(tx, state.cursor)
        if position is None:
            return SkipResult(state, None)
        gaps = list(state.pending_gaps)
        if repo.commits_out_of_order and position > state.cursor + 1:
            # Positions between the cursor and the skipped event may belong to writers still in flight.
            gaps = merge([*gaps, Gap(state.cursor + 1, position - 1, repo.observation_xid(), time.time())])
        cursor = position
    error = state.last_error
    repo.insert_dead_letter(
        tx, name, instance_id, position, "operator_skip", error.split(":", 1)[0] if error else None, error
    )
    status = "disabled" if state.status == "disabled" else "idle"
    state.status, state.cursor, state.pending_gaps = status, cursor, gaps
    state.attempts, state.last_error, state.rearm_count = 0, None, 0
    repo.write_state(tx, state, skipped=1)
    return SkipResult(_reread(repo, tx, name, instance_id), position)


def _poison(state: ConsumerState) -> int | None:
    """The position the consumer's last handler failure was on, if it is still to be delivered."""
    position = failed_position(state.last_error)
    if position is None:
        return None
    if position > state.cursor or any(g.lo <= position <= g.hi for g in state.pending_gaps):
        return position
    return None


def reset_consumer(
    db: Database, name: str, to: int | Literal["now"], instance_id: str = SHARED_INSTANCE
) -> ConsumerState:
    """Move the cursor to a position (0 = replay everything) or `now` (the high-water mark); clears attempts and
    errors, and the gaps (with `now`, the positions below the mark not visible yet become the pending gaps: an
    append in flight is delivered once it commits). Refused while a turn holds the row."""
    repo = ConsumerRepository(db)
    if repo.turn_in_process(name, instance_id):
        # Checked before the transaction, which would otherwise just wait for the turn to commit (SQLite).
        raise _processing(name, instance_id)
    with db.transaction() as tx:
        state = _locked(repo, tx, name, instance_id, nowait=True)
        hwm = repo.high_water_mark(tx)
        gaps: list[Gap] = []
        if to == "now":
            position = hwm
            gaps = _in_flight_holes(repo, tx, state.pending_gaps, hwm)
        elif isinstance(to, int) and not isinstance(to, bool) and 0 <= to <= hwm:
            position = to
        else:
            raise ValidationError(
                f"reset target must be 'now' or a position in 0..{hwm}, not {to!r}",
                code="CONSUMER_RESET_INVALID",
                target=str(to),
                highWaterMark=hwm,
            )
        status = "disabled" if state.status == "disabled" else "idle"
        _write(
            repo,
            tx,
            state,
            status=status,
            cursor=position,
            pending_gaps=gaps,
            attempts=0,
            last_error=None,
            rearm_count=0,
        )
        return _reread(repo, tx, name, instance_id)


RESET_HOLE_WINDOW = 10_000  # the last positions a reset to `now` looks at for appends still in flight


def _in_flight_holes(repo: ConsumerRepository, tx: Tx, pending: Sequence[Gap], hwm: int) -> list[Gap]:
    """The positions below the high-water mark that are not visible yet: those among the last RESET_HOLE_WINDOW and
    those of the consumer's pending gaps (below its cursor). An append in flight may still commit there, after the
    reset, and must still be delivered (pending gaps, retired once every writer that drew a position before now
    has ended). Only where positions commit out of order."""
    if not repo.commits_out_of_order:
        return []
    low = max(0, hwm - RESET_HOLE_WINDOW)
    ranges = holes(low, hwm, repo.positions_between(tx, low, hwm))
    for gap in pending:
        if gap.lo <= low:
            top = min(gap.hi, low)
            ranges += holes(gap.lo - 1, top + 1, [*repo.positions_between(tx, gap.lo - 1, top), top + 1])
    if not ranges:
        return []
    xid, seen = repo.observation_xid(), time.time()
    return merge(Gap(lo, hi, xid, seen) for lo, hi in ranges)


def wait_for(
    db: Database,
    name: str,
    position: int,
    *,
    timeout: float = 10.0,
    instance_id: str = SHARED_INSTANCE,
    interval: float = 0.01,
) -> ConsumerState:
    """Block until the consumer's cursor is ≥ position and no pending gap lies at or below it."""
    deadline = time.monotonic() + timeout
    while True:
        state = require_state(db, name, instance_id)
        if state.cursor >= position and not any(g.lo <= position for g in state.pending_gaps):
            return state
        if time.monotonic() > deadline:
            raise SettlekitError(
                f"consumer {name!r} did not reach position {position} in {timeout}s",
                code="CONSUMER_WAIT_TIMEOUT",
                status=504,
                cursor=state.cursor,
            )
        time.sleep(interval)


def dead_letters(db: Database, name: str, instance_id: str = SHARED_INSTANCE) -> list[dict[str, Any]]:
    with db.read() as tx:
        rows = ConsumerRepository(db).dead_letters(tx, name, instance_id)
    keys = ("id", "position", "eventId", "eventType", "reason", "errorClass", "errorMessage", "createdAt")
    return [{k: (str(v) if k == "createdAt" else v) for k, v in zip(keys, r, strict=True)} for r in rows]
