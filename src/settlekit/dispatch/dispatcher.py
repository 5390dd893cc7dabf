"""The durable dispatcher: passes, turns, halt-on-poison, re-arm, dead letters and exact gap handling.

One turn = one transaction that locks the consumer row (SKIP LOCKED), fetches pending-gap rows and rows past
the cursor, delivers them to the handler on that same transaction (a savepoint per call) and writes the new
cursor, attempts and gaps before COMMIT. A crash anywhere before COMMIT re-delivers; nothing is skipped.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from settlekit import failpoints
from settlekit.dispatch.gaps import holes, merge, oldest_seen_at, settle
from settlekit.dispatch.metrics import DispatchMetrics, metrics_for
from settlekit.dispatch.model import (
    SHARED_INSTANCE,
    Consumer,
    ConsumerContext,
    ConsumerDead,
    DrainTimeout,
    ErrorPolicy,
    failure_text,
)
from settlekit.dispatch.outage import OutageBackoff
from settlekit.errors import ConfigurationError, DatabaseUnavailableError
from settlekit.store.consumers import ConsumerRepository, ConsumerState, DispatchedEvent, Gap
from settlekit.store.db import Database, Tx
from settlekit.store.scoped_tx import ScopedTx

log = logging.getLogger("settlekit.dispatch")


@dataclass
class ConsumerResult:
    """What one turn did. `outcome`: ok, idle, error, or a skip reason (disabled, dead, backoff,
    locked_by_other_instance, not_registered)."""

    processed: int = 0
    failed: int = 0
    skipped: int = 0
    outcome: str = "ok"
    more: bool = False
    blocked: bool = False  # stopped short: the pending-gap list is full


@dataclass
class PassResult:
    processed: int = 0
    failed: int = 0
    skipped: int = 0
    by_consumer: dict[str, ConsumerResult] = field(default_factory=dict)

    def add(self, name: str, result: ConsumerResult) -> None:
        self.processed += result.processed
        self.failed += result.failed
        self.skipped += result.skipped
        self.by_consumer[name] = result


@dataclass
class _Outcome:
    attempts: int
    last_error: str | None
    resolved: list[int] = field(default_factory=list)
    processed: int = 0
    failed: int = 0
    skipped: int = 0
    dead: bool = False


def _describe(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc) or type(exc).__name__


def _validate_options(
    consumers: Sequence[Consumer],
    instance_id: str | None,
    batch_size: int,
    max_attempts: int,
    max_pending_gap_ranges: int,
) -> None:
    """Reject a consumer set or options the dispatcher cannot run (ConfigurationError)."""
    names = [c.name for c in consumers]
    if len(set(names)) != len(names):
        raise ConfigurationError("consumer names must be unique", code="DISPATCH_DUPLICATE_CONSUMER")
    if instance_id == SHARED_INSTANCE:
        raise ConfigurationError(f"instance_id must not be {SHARED_INSTANCE!r}", code="DISPATCH_INSTANCE_ID")
    if instance_id is None and any(c.delivery == "per_instance" for c in consumers):
        raise ConfigurationError(
            "per-instance consumers need the dispatcher's instance_id", code="DISPATCH_INSTANCE_ID"
        )
    if batch_size < 1 or max_attempts < 1 or max_pending_gap_ranges < 1:
        raise ConfigurationError(
            "batch_size, max_attempts and max_pending_gap_ranges must be ≥ 1",
            code="DISPATCH_OPTIONS_INVALID",
        )


# a blocked turn that found nothing changed since the last full one is still a full one at least this often (s)
BLOCKED_RECHECK = 5.0


@dataclass(frozen=True, slots=True)
class _Blocked:
    """What the last full turn of a blocked consumer saw: its row's version and cursor, the first position past
    the cursor (the row it stopped at, or one below it that committed since), the transactions of the database
    running when it took its snapshot, the horizon its gaps retire at, and when."""

    revision: str
    cursor: int
    next_position: int | None
    running: frozenset[int]
    retires_at: int  # the smallest xmax of its gaps: none retires while the horizon stays below it
    at: float


# turn outcomes that no poll can change: only a NOTIFY (a commit), the horizon moving or a cooldown can
_STUCK = frozenset({"idle", "disabled", "dead", "locked_by_other_instance", "not_registered"})


class Dispatcher:
    """Runs consumers over the global event order of one database.

    Options (05-dispatcher.md §1): `batch_size`, `poll_interval` (s), `max_attempts`, `rearm_cooldown` (s),
    `max_rearm_count`, `backoff_base`/`backoff_max` (s, capped exponential delay between retries of a failing
    event), `instance_id` (required for per-instance consumers), `max_pending_gap_ranges`, `listen` (use
    LISTEN/NOTIFY wake-ups), `idle_poll_max` (s, see below), `gap_log_interval` (s, at most one "gap list full"
    warning per consumer per interval), `registry` (prometheus; default global).

    A pass that fails (the database down) is retried with exponential backoff and jitter, and a LISTEN session
    that fails is opened again the same way while the loop polls (`OutageBackoff`): one log line when it starts
    failing, one every 30 s while it does, one when it works again.

    A turn that made no progress never asks for an immediate follow-up: the loop then waits for a wake-up or
    `poll_interval`, so a consumer blocked behind a long-running transaction costs a turn per poll, not a busy
    loop. On PostgreSQL, while the LISTEN session works, a pass in which no consumer could move (idle, blocked
    by a full gap list, dead, disabled or held by another instance) doubles that wait, up to `idle_poll_max` (s):
    new events and the commits that fill gaps send a NOTIFY, which wakes the loop at once, so the poll is only a
    safety net (a writer that rolled back leaves its gap to the horizon, seen within `idle_poll_max`). Any
    wake-up, any progress, a consumer waiting out a retry backoff or a failed LISTEN session brings it back to
    `poll_interval`.
    """

    def __init__(
        self,
        db: Database,
        consumers: Sequence[Consumer],
        *,
        instance_id: str | None = None,
        batch_size: int = 200,
        poll_interval: float = 0.1,
        max_attempts: int = 10,
        rearm_cooldown: float = 300.0,
        max_rearm_count: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 60.0,
        max_pending_gap_ranges: int = 10_000,
        listen: bool = True,
        idle_poll_max: float = 1.0,
        wake_coalesce: float = 0.01,
        gap_log_interval: float = 30.0,
        registry: CollectorRegistry | None = None,
        logger: logging.Logger | None = None,
    ):
        _validate_options(consumers, instance_id, batch_size, max_attempts, max_pending_gap_ranges)
        self.db = db
        self.repo = ConsumerRepository(db)
        self.consumers = list(consumers)
        self.instance_id = instance_id
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.max_attempts = max_attempts
        self.rearm_cooldown = rearm_cooldown
        self.max_rearm_count = max_rearm_count
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_pending_gap_ranges = max_pending_gap_ranges
        self.listen = listen
        self.idle_poll_max = max(idle_poll_max, poll_interval)
        self._idle_wait = poll_interval  # the next wait after a pass in which nothing could move (LISTEN on)
        # a pass starts at least this long after the previous one started, unless catching up (see _pace)
        self.wake_coalesce = wake_coalesce
        self._pass_started = 0.0
        self.gap_log_interval = gap_log_interval
        self._gap_logged: dict[tuple[str, str], float] = {}
        self._blocked: dict[tuple[str, str], _Blocked] = {}  # consumers whose last turn was blocked, unchanged
        self.metrics: DispatchMetrics = metrics_for(registry)
        self.log = logger or log
        self._pass_lock = threading.Lock()
        self._registered = False
        self._exhausted: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None
        self.pass_outage = OutageBackoff(self.log, "dispatcher pass")
        self.listen_outage = OutageBackoff(self.log, "dispatcher LISTEN session")
        self._listen_retry_at = 0.0  # monotonic time before which a failed LISTEN session is not tried again

    # ------------------------------------------------------------------ lifecycle

    def shard(self, consumer: Consumer) -> str:
        """The instance_id of this consumer's state row on this dispatcher."""
        if consumer.delivery == "shared":
            return SHARED_INSTANCE
        assert self.instance_id is not None
        return self.instance_id

    def ensure_registered(self) -> None:
        """Create a state row per consumer shard if missing; never touches an existing cursor."""
        with self.db.transaction() as tx:
            for c in self.consumers:
                self.repo.register(tx, c.name, self.shard(c), at_head=c.start_from == "now")
        self._registered = True

    def start(self) -> None:
        """Pre-register, then run passes on a background thread (wake-ups plus polling)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self.ensure_registered()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"settlekit-dispatch-{self.instance_id or 'shared'}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the background thread; the turn in flight finishes (commits) first."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise DrainTimeout("dispatcher thread did not stop in time", code="DISPATCH_STOP_TIMEOUT")
        self._thread = None

    def _loop(self) -> None:
        catching_up = False
        while not self._stop.is_set():
            if not catching_up and self._pace():
                return  # stopped while pacing
            try:
                result = self.run_once()
            except Exception as exc:
                self.last_error = exc
                self._stop.wait(self.pass_outage.failed(exc))
                continue
            except BaseException as exc:  # a simulated crash ends the thread like a dying process
                self.last_error = exc
                self.log.error("dispatcher thread ended by %s", type(exc).__name__, exc_info=exc)
                return
            self.pass_outage.succeeded()
            results = result.by_consumer.values()
            catching_up = any(r.more for r in results)
            if not any(r.more or r.processed for r in results):
                self._wait(stuck=all(r.outcome in _STUCK for r in results))
            else:
                self._idle_wait = self.poll_interval

    def _pace(self) -> bool:
        """Start a pass no sooner than `wake_coalesce` after the last one started (a backlog, read in full batches,
        is not paced): under a steady stream of commits one pass takes what several of them wrote, instead of a
        pass and its transaction per commit; the first commit after a quiet spell is handled at once. True when the
        dispatcher was stopped meanwhile."""
        rest = self._pass_started + self.wake_coalesce - time.perf_counter()
        return rest > 0 and self._stop.wait(rest)

    def _wait(self, *, stuck: bool = False) -> None:
        """Until a wake-up or `poll_interval` (longer after passes in which nothing could move: `stuck`, see the
        class); while the LISTEN session is down, poll (it is tried again after its backoff)."""
        if not self.listen or time.monotonic() < self._listen_retry_at:
            self._idle_wait = self.poll_interval
            self._stop.wait(self.poll_interval)
            return
        label = self.instance_id or SHARED_INSTANCE
        # only a wake-up every writer sends (PostgreSQL's NOTIFY, not SQLite's in-process one) may stand in for polls
        timeout = self._idle_wait if stuck and self.db.wakes_across_processes else self.poll_interval
        try:
            woke = self.db.wait_for_notify(timeout)
        except Exception as exc:
            self.metrics.listen_connected.labels(label).set(0)
            self._listen_retry_at = time.monotonic() + self.listen_outage.failed(exc)
            self._idle_wait = self.poll_interval
            self._stop.wait(self.poll_interval)
            return
        self.metrics.listen_connected.labels(label).set(1)
        self.listen_outage.succeeded()
        self._idle_wait = self.poll_interval if woke or not stuck else min(2 * timeout, self.idle_poll_max)

    # ------------------------------------------------------------------ passes

    def run_once(self) -> PassResult:
        """One pass: an idle pre-check, then a turn for every consumer with possible work."""
        with self._pass_lock:
            if not self._registered:
                self.ensure_registered()
            started = self._pass_started = time.perf_counter()
            result = PassResult()
            idle = self._precheck()
            for c in self.consumers:
                if (c.name, self.shard(c)) in idle:
                    result.add(c.name, ConsumerResult(outcome="idle"))
                    continue
                result.add(c.name, self._turn(c))
            self.metrics.pass_duration.labels(self.instance_id or SHARED_INSTANCE).observe(
                time.perf_counter() - started
            )
            return result

    def _precheck(self) -> set[tuple[str, str]]:
        """Consumers provably without work (no writes); also refreshes every lag gauge."""
        keys = {(c.name, self.shard(c)) for c in self.consumers}
        with self.db.read() as tx:
            rows = self.repo.precheck(tx, sorted({k[0] for k in keys}))
        idle: set[tuple[str, str]] = set()
        for row in rows:
            name, inst = row.name, row.instance_id
            if (name, inst) not in keys:
                continue
            self.metrics.lag_events.labels(name, inst).set(max(0, int(row.high_water_mark) - int(row.cursor)))
            self.metrics.lag_seconds.labels(name, inst).set(float(row.next_event_age or 0.0))
            if row.no_gaps:
                self.metrics.oldest_gap_age.labels(name, inst).set(0.0)
            if row.status == "disabled" or (row.status != "dead" and row.no_gaps and row.next_event_age is None):
                idle.add((name, inst))
        return idle

    def _backoff(self, attempts: int) -> float:
        return float(min(self.backoff_base * (2 ** max(0, attempts - 1)), self.backoff_max))

    def _turn(self, consumer: Consumer) -> ConsumerResult:
        name, inst = consumer.name, self.shard(consumer)
        started = time.perf_counter()
        try:
            with self.db.transaction() as tx, self.repo.turn(name, inst):
                result = self._turn_in_tx(tx, consumer, inst)
        except DatabaseUnavailableError:
            raise  # the database, not the consumer: the pass fails, and is retried with backoff
        except Exception as exc:
            cls, msg = _describe(exc)
            self.metrics.turn_errors.labels(name).inc()
            self.log.exception("turn of %s (%s) rolled back", name, inst)
            try:
                with self.db.transaction() as tx:
                    self.repo.record_error(tx, name, inst, f"turn error: {cls}: {msg}")
            except Exception:
                self.log.exception("could not record the turn error of %s (%s)", name, inst)
            return ConsumerResult(outcome="error")
        finally:
            self.metrics.turn_duration.labels(name).observe(time.perf_counter() - started)
        if result.blocked:
            self.metrics.blocked_turns.labels(name, inst).inc()
            try:
                self._warn_blocked(name, inst)
            except Exception:  # the turn committed; only the diagnosis failed
                self.log.warning("consumer %s (%s): pending gap list full; could not look up the blocking"
                                 " transaction", name, inst, exc_info=True)
        return result

    def _turn_in_tx(self, tx: Tx, consumer: Consumer, inst: str) -> ConsumerResult:
        name = consumer.name
        repo = self.repo
        if self._still_blocked(tx, name, inst):
            return ConsumerResult(outcome="idle", blocked=True)
        got = repo.read_state(tx, name, inst, "skip")
        if got is None:
            reason = "locked_by_other_instance" if repo.exists(tx, name, inst) else "not_registered"
            return ConsumerResult(outcome=reason)
        state, age = got
        skip = self._skip_reason(tx, name, inst, state, age)
        if skip is not None:
            return ConsumerResult(outcome=skip)

        # S1 (horizon) precedes S2 (fetch): a writer that ended before S1 is visible to S2 if it committed.
        horizon, running = repo.snapshot(tx)
        start_cursor, gaps = state.cursor, state.pending_gaps
        rows = repo.fetch_events(tx, start_cursor, gaps, self.batch_size)
        failpoints.hit("dispatch.after_fetch", name)
        fetched = [r.position for r in rows]
        complete_upto = sys.maxsize if len(rows) < self.batch_size else fetched[-1]
        bounded = self._bound(rows, start_cursor, len(gaps))
        blocked = len(bounded) < len(rows)
        rows = bounded

        outcome = self._deliver(tx, consumer, inst, state, rows)
        failpoints.hit("dispatch.after_deliver", name)

        new_cursor = max((p for p in outcome.resolved if p > start_cursor), default=start_cursor)
        remaining, n_resolved, n_retired = self._settle_gaps(
            gaps, outcome.resolved, fetched, start_cursor, new_cursor, horizon, complete_upto
        )

        changed = bool(outcome.resolved or outcome.failed or remaining != gaps)
        if changed:
            self._save_state(tx, name, inst, state, outcome, new_cursor, remaining)
        elif blocked and remaining:
            self._remember_blocked(tx, name, inst, running, min(g.xmax for g in remaining))
        self._observe_turn(tx, name, inst, outcome, n_resolved, n_retired, remaining, new_cursor if changed else None)
        failpoints.hit("dispatch.before_commit", name)
        return ConsumerResult(
            processed=outcome.processed,
            failed=outcome.failed,
            skipped=outcome.skipped,
            outcome="ok" if changed else "idle",
            # a full fetch may hide more work, but only a turn that moved something may skip the wait
            more=len(fetched) >= self.batch_size and changed and not outcome.failed,
            blocked=blocked,
        )

    def _still_blocked(self, tx: Tx, name: str, inst: str) -> bool:
        """Whether this consumer's turn would find what its last one did, blocked by a full gap list: then it is
        not made again, and the turn costs one short statement whatever the size of the list (it would read the
        list, look up each range and settle it). So when, since the last full turn: its state row is the same
        version (nothing wrote it), the first position past the cursor is the same, and every transaction of the
        database running at that turn's snapshot still runs, and the horizon is still below every gap's xmax. A
        pending gap can only be filled by a transaction that had drawn its position before the gap was recorded
        (so running then, not yet visible), and only retires once the horizon reaches its xmax; a hole below the
        blocking row filled by a transaction started since changes the first position past the cursor, and
        anything drawn later lies above it. Every BLOCKED_RECHECK seconds the turn is made in full all the same."""
        key = (name, inst)
        last = self._blocked.pop(key, None)
        if last is None or time.monotonic() - last.at >= BLOCKED_RECHECK:
            return False
        probe = self.repo.blocked_probe(tx, name, inst)
        if (probe is None or probe.revision != last.revision or probe.cursor != last.cursor
                or probe.next_position != last.next_position or not last.running <= probe.running
                or probe.horizon >= last.retires_at):
            return False
        self._blocked[key] = last
        return True

    def _remember_blocked(self, tx: Tx, name: str, inst: str, running: frozenset[int], retires_at: int) -> None:
        """After a full turn that was blocked and wrote nothing: what the next one compares with (see
        `_still_blocked`). `running` is from the turn's snapshot, taken before its fetch."""
        probe = self.repo.blocked_probe(tx, name, inst)
        if probe is not None:
            self._blocked[(name, inst)] = _Blocked(probe.revision, probe.cursor, probe.next_position, running,
                                                   retires_at, time.monotonic())

    def _skip_reason(self, tx: Tx, name: str, inst: str, state: ConsumerState, age: float) -> str | None:
        """Why this consumer gets no delivery this turn (disabled, dead, backoff), or None to go on.
        A dead consumer past its cooldown with re-arm budget left is re-armed here and goes on."""
        if state.status == "disabled":
            return "disabled"
        if state.status == "dead":
            if age >= self.rearm_cooldown and state.rearm_count < self.max_rearm_count:
                self._rearm(tx, name, inst, state)
            else:
                if state.rearm_count >= self.max_rearm_count and (name, inst) not in self._exhausted:
                    self._exhausted.add((name, inst))
                    self.metrics.rearm_exhausted.labels(name, inst).inc()
                return "dead"
        elif state.attempts > 0 and age < self._backoff(state.attempts):
            return "backoff"
        return None

    def _rearm(self, tx: Tx, name: str, inst: str, state: ConsumerState) -> None:
        """Revive a dead consumer: idle, attempts cleared, one more re-arm counted."""
        state.status, state.attempts, state.last_error = "idle", 0, None
        state.rearm_count += 1
        self.repo.write_state(tx, state)
        self.metrics.rearm.labels(name, inst).inc()
        self._exhausted.discard((name, inst))
        self.log.warning(
            "re-armed dead consumer %s (%s), re-arm %d of %d",
            name,
            inst,
            state.rearm_count,
            self.max_rearm_count,
        )

    def _settle_gaps(
        self,
        gaps: list[Gap],
        resolved: list[int],
        fetched: list[int],
        start_cursor: int,
        new_cursor: int,
        horizon: int,
        complete_upto: int,
    ) -> tuple[list[Gap], int, int]:
        """The pending-gap list after this turn, with the counts of gap positions resolved and retired."""
        remaining, n_resolved, n_retired = settle(
            gaps,
            resolved=[p for p in resolved if p <= start_cursor],
            fetched=fetched,
            horizon=horizon,
            complete_upto=complete_upto,
        )
        # where positions commit out of order, one skipped now may still commit: it becomes a pending gap
        above = [p for p in fetched if p > start_cursor]
        new_holes = holes(start_cursor, new_cursor, above) if self.repo.commits_out_of_order else []
        if new_holes:
            xid = self.repo.observation_xid()
            seen = time.time()
            remaining = merge([*remaining, *(Gap(lo, hi, xid, seen) for lo, hi in new_holes)])
        return remaining, n_resolved, n_retired

    def _save_state(
        self,
        tx: Tx,
        name: str,
        inst: str,
        state: ConsumerState,
        outcome: _Outcome,
        new_cursor: int,
        remaining: list[Gap],
    ) -> None:
        """Write the turn's cursor, attempts, status and gaps on the turn's transaction."""
        state.cursor = new_cursor
        state.attempts = outcome.attempts
        state.last_error = outcome.last_error
        state.status = "dead" if outcome.dead else "idle"
        state.pending_gaps = remaining
        if outcome.processed:
            state.rearm_count = 0
        self.repo.write_state(tx, state, skipped=outcome.skipped)
        if outcome.dead:
            self.metrics.dead.labels(name, inst).inc()
            self.log.error(
                "consumer %s (%s) is dead after %d attempts: %s",
                name,
                inst,
                outcome.attempts,
                outcome.last_error,
            )

    def _observe_turn(
        self,
        tx: Tx,
        name: str,
        inst: str,
        outcome: _Outcome,
        n_resolved: int,
        n_retired: int,
        remaining: list[Gap],
        moved_to: int | None,
    ) -> None:
        """Update the turn's counters and gauges; the lag ones only when the turn changed the state
        (`moved_to`: the new cursor then, else None)."""
        m = self.metrics
        if outcome.processed:
            m.processed.labels(name, inst).inc(outcome.processed)
        if n_resolved:
            m.gaps_resolved.labels(name, inst).inc(n_resolved)
        if n_retired:
            m.gaps_retired.labels(name, inst).inc(n_retired)
        m.pending_gaps.labels(name, inst).set(sum(g.size for g in remaining))
        oldest = oldest_seen_at(remaining)
        m.oldest_gap_age.labels(name, inst).set(0.0 if oldest is None else max(0.0, time.time() - oldest))
        if moved_to is not None:
            hwm, next_age = self.repo.lag(tx, moved_to)
            m.lag_events.labels(name, inst).set(max(0, hwm - moved_to))
            m.lag_seconds.labels(name, inst).set(float(next_age or 0.0))

    def _bound(self, rows: list[DispatchedEvent], cursor: int, n_ranges: int) -> list[DispatchedEvent]:
        """Stop before the row whose hole would push the gap list past max_pending_gap_ranges."""
        prev = cursor
        for i, row in enumerate(rows):
            if row.position <= cursor:
                continue
            if row.position > prev + 1:
                n_ranges += 1
                if n_ranges > self.max_pending_gap_ranges:
                    return rows[:i]
            prev = row.position
        return rows

    def _warn_blocked(self, name: str, inst: str) -> None:
        """At most one warning per consumer per `gap_log_interval`, naming the transaction that holds the
        gaps open (the oldest one with a transaction id: it keeps the horizon from passing them)."""
        key = (name, inst)
        now = time.monotonic()
        last = self._gap_logged.get(key)
        if last is not None and now - last < self.gap_log_interval:
            return
        self._gap_logged[key] = now
        blocker = self.repo.oldest_writer()
        if blocker is None:
            self.log.warning(
                "consumer %s (%s): %d pending gap ranges, the limit; waiting for the writers holding them to end",
                name,
                inst,
                self.max_pending_gap_ranges,
            )
            return
        self.log.warning(
            "consumer %s (%s): %d pending gap ranges, the limit; blocked by the transaction of backend pid %s"
            " (database %s, state %s), open for %.1f s",
            name,
            inst,
            self.max_pending_gap_ranges,
            blocker.pid,
            blocker.database,
            blocker.state,
            blocker.age_seconds,
        )

    def _deliver(
        self, tx: Tx, consumer: Consumer, inst: str, state: ConsumerState, rows: list[DispatchedEvent]
    ) -> _Outcome:
        out = _Outcome(attempts=state.attempts, last_error=state.last_error)
        name = consumer.name
        types = consumer.event_types
        matching = rows if types is None else [r for r in rows if r.type in types]
        if (
            consumer.batch_handler is not None
            and matching
            and self._deliver_batch(tx, consumer, inst, rows, matching, out)
        ):
            return out
        policy = consumer.error_policy
        max_attempts = policy.max_attempts or self.max_attempts
        scoped = ScopedTx(tx, "sk_event")
        handler = consumer.handler
        resolved = out.resolved
        ctx: ConsumerContext | None = None
        halted = False
        for row in rows:
            if types is not None and row.type not in types:
                resolved.append(row.position)
                continue
            if ctx is None:
                ctx = ConsumerContext(scoped, name, inst, self.log, self.metrics, row)
            else:
                ctx.bind(row)
            try:
                handler(row, ctx)
            except Exception as exc:
                scoped.rollback()
                if self._skip_failed(tx, name, inst, policy, max_attempts, row, exc, out):
                    continue
                halted = True
                break
            if scoped.is_open:
                scoped.release()
            resolved.append(row.position)
            out.processed += 1
        if resolved and not halted:
            out.attempts, out.last_error = 0, None
        return out

    def _deliver_batch(
        self,
        tx: Tx,
        consumer: Consumer,
        inst: str,
        rows: list[DispatchedEvent],
        matching: list[DispatchedEvent],
        out: _Outcome,
    ) -> bool:
        """Hand `matching` to the batch handler in one savepoint. True: all of `rows` resolved into `out`;
        False: the batch failed and was rolled back, deliver one by one."""
        assert consumer.batch_handler is not None
        name = consumer.name
        scoped = ScopedTx(tx, "sk_batch")
        batch_ctx = ConsumerContext(scoped, name, inst, self.log, self.metrics, matching[-1])
        try:
            consumer.batch_handler(matching, batch_ctx)
        except Exception as exc:
            scoped.rollback()
            cls, msg = _describe(exc)
            self.log.warning(
                "consumer %s: batch of %d failed (%s: %s); delivering one by one",
                name,
                len(matching),
                cls,
                msg,
            )
            return False
        scoped.release()
        out.resolved = [r.position for r in rows]
        out.processed = len(matching)
        out.attempts, out.last_error = 0, None
        return True

    def _skip_failed(
        self,
        tx: Tx,
        name: str,
        inst: str,
        policy: ErrorPolicy,
        max_attempts: int,
        row: DispatchedEvent,
        exc: Exception,
        out: _Outcome,
    ) -> bool:
        """Account for a handler failure on `row` (already rolled back). True: skipped into a dead letter,
        delivery goes on; False: delivery halts at this row (dead once attempts reach `max_attempts`)."""
        cls, msg = _describe(exc)
        out.failed += 1
        self.metrics.failed.labels(name, inst, cls).inc()
        reason = ("skip_permanent_error" if isinstance(exc, policy.permanent)
                  else "skip_apply_error" if policy.skip_apply_errors else None)
        if reason is not None:
            self.repo.insert_dead_letter(tx, name, inst, row.position, reason, cls, msg)
            self.metrics.skipped.labels(name, inst, reason).inc()
            self.log.warning("consumer %s: skipped event at position %d (%s: %s)", name, row.position, cls, msg)
            out.skipped += 1
            out.resolved.append(row.position)
            out.attempts, out.last_error = 0, None
            return True
        # attempts count failed turns on the current head event; an earlier success moved the head
        out.attempts = (0 if out.resolved else out.attempts) + 1
        out.last_error = failure_text(cls, msg, row.position)
        out.dead = out.attempts >= max_attempts
        return False

    # ------------------------------------------------------------------ drain and state

    def drain(self, timeout: float = 30.0) -> PassResult:
        """Run passes until every consumer (except disabled ones) has delivered everything visible up to the
        high-water mark taken at call time. Raises ConsumerDead or DrainTimeout."""
        deadline = time.monotonic() + timeout
        with self.db.read() as tx:
            target = self.repo.high_water_mark(tx)
        total = PassResult()
        while True:
            result = self.run_once()
            for name, r in result.by_consumer.items():
                prev = total.by_consumer.get(name, ConsumerResult())
                total.add(
                    name,
                    ConsumerResult(
                        prev.processed + r.processed,
                        prev.failed + r.failed,
                        prev.skipped + r.skipped,
                        r.outcome,
                    ),
                )
            behind = self._behind(target)
            if not behind:
                return total
            dead = [s for s in behind if s.status == "dead"]
            if dead:
                raise ConsumerDead(
                    f"consumer {dead[0].name!r} is dead: {dead[0].last_error}",
                    consumers=[s.name for s in dead],
                )
            if time.monotonic() > deadline:
                raise DrainTimeout(
                    f"consumers still behind position {target}: {[s.name for s in behind]}",
                    target=target,
                    consumers=[s.to_json() for s in behind],
                )
            if result.processed == 0:
                time.sleep(min(self.poll_interval, 0.01))

    def _behind(self, target: int) -> list[ConsumerState]:
        out = []
        with self.db.read() as tx:
            for c in self.consumers:
                got = self.repo.read_state(tx, c.name, self.shard(c))
                if got is None:
                    continue
                state = got[0]
                if state.status == "disabled":
                    continue
                low = [g for g in state.pending_gaps if g.lo <= target]
                if state.cursor < target or self.repo.smallest_visible_in(tx, low) is not None:
                    out.append(state)
        return out

    def state(self, name: str, instance_id: str | None = None) -> ConsumerState | None:
        if instance_id is None:
            consumer = next((c for c in self.consumers if c.name == name), None)
            instance_id = self.shard(consumer) if consumer is not None else SHARED_INSTANCE
        return self.repo.current(name, instance_id)
