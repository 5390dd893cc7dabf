"""The event recorder: writes one append batch in one transaction (one round trip on PostgreSQL).

The append use case (`settlekit.append`) builds a `CommitBatch` (store/rows.py); the recorder hands it to the
database's dialect family (`db.family.events`: store/postgres/events.py, store/sqlite/events.py), which checks the
expected stream head, inserts the events, moves the head with the new snapshot and runs `after` (the domain's
rows, the idempotency record) in the same transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from settlekit import failpoints
from settlekit.errors import DatabaseUnavailableError, OverloadedError
from settlekit.store.database import AfterCommit, Database, EventWriter
from settlekit.store.rows import (
    CommitBatch,
    CommitOutcome,
    Committed,
    DuplicateKey,
    GroupRolledBack,
    HeadMismatch,
    KeyInactive,
    duplicate_kind,
)

__all__ = ["MAX_QUEUED_APPENDS", "AfterCommit", "CommitBatch", "CommitOutcome", "Committed", "DuplicateKey",
           "EventRecorder", "GroupCommitter", "GroupRolledBack", "HeadMismatch", "KeyInactive", "duplicate_kind"]


# appends a GroupCommitter holds at most (queued or being written); far above what a process keeps in flight
# under load (one per concurrent client), small enough that a stalled database cannot pile up memory and latency
MAX_QUEUED_APPENDS = 256
# seconds a group commit waits for more appends before it writes, while appends come concurrently
GROUP_WINDOW = 0.002


class EventRecorder:
    """Writes append batches to one Database with its dialect's backend. With `group_commit`, the commits of
    concurrent callers in this process are coalesced (GroupCommitter, with its `window`)."""

    def __init__(self, db: Database, *, group_commit: bool = False, max_queued: int = MAX_QUEUED_APPENDS,
                 group_window: float = GROUP_WINDOW):
        self.db = db
        backend = db.family.events
        self._commit = backend.commit
        self.group = (GroupCommitter(db, backend, max_queued=max_queued, window=group_window) if group_commit
                      else None)

    def commit(self, batch: CommitBatch, after: AfterCommit | None = None) -> CommitOutcome:
        """Write `batch` if the stream head is the one it expects, with `after` in the same transaction.
        Raises DuplicateKey when an insert breaks a uniqueness rule (nothing is written). Returns once the
        write is committed."""
        if self.group is not None:
            return self.group.commit(batch, after)
        return self._commit(self.db, batch, after)

    async def commit_async(self, batch: CommitBatch, after: AfterCommit | None = None) -> CommitOutcome:
        """`commit` for a caller on an event loop: it waits for the group commit writer without holding a thread
        (without group commit, the write runs on a worker thread)."""
        if self.group is not None:
            return await self.group.submit_async(batch, after)
        return await asyncio.to_thread(self._commit, self.db, batch, after)

    def close(self) -> None:
        if self.group is not None:
            self.group.close()


class _LoopOutcome:
    """Where the outcome of an append submitted from an event loop goes: an asyncio future of that loop, settled on
    the loop (the writer hands each loop the outcomes of a group in one call)."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[CommitOutcome]):
        self.loop = loop
        self.future = future


# one append waiting for the writer: what to write, and where its outcome goes
_Pending = tuple[CommitBatch, AfterCommit | None, "Future[CommitOutcome] | _LoopOutcome"]


class GroupCommitter:
    """Group commit: one writer thread takes every append waiting in this process and writes them in ONE
    transaction (one commit, one WAL flush), then answers each caller.

    Each append keeps its own outcome. A head mismatch writes nothing (the backend checks before it inserts), so
    it is that append's answer alone. Any other failure while the group is written (a uniqueness violation, an
    error in a domain write) rolls the whole transaction back and the group is written again one append per
    transaction, so the failure lands on its own append only. Nothing is answered before its commit: a failure
    of the COMMIT itself (or a crash) is every caller's error, never a success. At most `max_group` appends go
    in one transaction. While appends come concurrently (the last group held more than one), the writer waits
    `window` seconds after the first append of a group for others to join it: fewer, larger transactions cost the
    process and the database less per append, for a latency of at most `window` more. An append that comes
    alone is written at once.

    Admission is bounded: while the database is known to be unreachable, or once `max_queued` appends wait for
    their outcome, `submit` refuses at once (DatabaseUnavailableError, OverloadedError) and nothing is queued. A
    group that cannot reach the database is answered DatabaseUnavailableError as a whole (no append of it is
    to blame, so it is not written again one by one)."""

    def __init__(self, db: Database, backend: EventWriter, *, max_group: int = 64,
                 max_queued: int = MAX_QUEUED_APPENDS, window: float = GROUP_WINDOW):
        self.db = db
        self.backend = backend
        self.max_group = max_group
        self.max_queued = max_queued
        self.window = window
        self.pause: Callable[[float], None] = time.sleep  # how the writer waits out its window
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._pending = 0  # appends submitted and not yet answered
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Appends submitted and not yet answered."""
        return self._pending

    def commit(self, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome:
        """Queue `batch` for the writer and wait for its outcome (raises what its write raised)."""
        return self.submit(batch, after).result()

    def submit(self, batch: CommitBatch, after: AfterCommit | None) -> Future[CommitOutcome]:
        """Queue `batch` for the writer (started if none runs); the future holds its outcome. It cannot be
        cancelled: once queued, the append is written whether or not its caller still waits. Refused at once,
        nothing queued: DatabaseUnavailableError while the database is known to be unreachable, OverloadedError
        when `max_queued` appends already wait."""
        self.db.check_reachable()
        future: Future[CommitOutcome] = Future()
        future.set_running_or_notify_cancel()
        self._enqueue(batch, after, future)
        return future

    def submit_async(self, batch: CommitBatch, after: AfterCommit | None) -> asyncio.Future[CommitOutcome]:
        """`submit` for a caller on an event loop: the outcome arrives in an asyncio future of the running loop
        (cancelling it does not unqueue the append)."""
        self.db.check_reachable()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[CommitOutcome] = loop.create_future()
        self._enqueue(batch, after, _LoopOutcome(loop, future))
        return future

    def _enqueue(self, batch: CommitBatch, after: AfterCommit | None, future: Future[CommitOutcome] | _LoopOutcome
                 ) -> None:
        with self._lock:  # a writer that is stopping leaves only once nothing is queued (see _run)
            if self._pending >= self.max_queued:
                raise OverloadedError(f"{self._pending} appends already wait for the database",
                                      queued=self._pending, limit=self.max_queued)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="settlekit-group-commit", daemon=True)
                self._thread.start()
            self._pending += 1
            self._queue.put((batch, after, future))

    def close(self) -> None:
        """Stop the writer once the appends already queued are written."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(30)

    def _run(self) -> None:
        last_group = 1
        while True:
            first = self._queue.get()
            if first is not None and last_group > 1 and self.window > 0:
                self.pause(self.window)  # appends come concurrently: let the ones on their way join this group
            if first is None:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None  # the next submit starts a writer
                        return
                self._queue.put(None)  # appends queued behind the stop: write them first
                continue
            group = [first]
            while len(group) < self.max_group:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this group
                    break
                group.append(item)
            last_group = len(group)
            self._answer(group)

    def _answer(self, group: list[_Pending]) -> None:
        try:
            outcomes: Sequence[CommitOutcome | BaseException] = self.write_group(
                [(batch, after) for batch, after, _ in group])
        except BaseException as exc:  # a crash or a failed COMMIT: nobody is told "committed"
            outcomes = [exc] * len(group)
        self._answered(len(group))
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[CommitOutcome], Any]]] = {}
        for (_, _, future), outcome in zip(group, outcomes, strict=True):
            if isinstance(future, _LoopOutcome):
                by_loop.setdefault(future.loop, []).append((future.future, outcome))
            elif isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for these outcomes
                loop.call_soon_threadsafe(_settle, settled)

    def _answered(self, count: int) -> None:
        with self._lock:
            self._pending -= count

    def write_group(self, group: Sequence[tuple[CommitBatch, AfterCommit | None]]
                    ) -> list[CommitOutcome | BaseException]:
        """Write `group` in one transaction, or (after a failure before COMMIT) each append in a transaction of
        its own; the outcome of each, or the exception it raised. Raises what made the COMMIT fail, a
        DatabaseUnavailableError (the database could not be reached: nothing tried alone) or a failpoint's
        crash."""
        if len(group) == 1:
            return [self._alone(*group[0])]
        written = False

        def before_commit(count: int) -> None:
            nonlocal written
            for index in range(count):
                failpoints.hit("append.group_commit", index)
            written = True

        try:
            return list(self.backend.write_group(self.db, group, before_commit))
        except GroupRolledBack:
            pass  # a follow-up write was refused with the COMMIT: nothing written
        except DatabaseUnavailableError:
            raise  # the database, not an append, failed: every append gets the error (none is tried alone)
        except Exception:
            if written:
                raise  # the COMMIT failed: unknown outcome, so no answer is a success
        return [self._alone(batch, after) for batch, after in group]

    def _alone(self, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome | BaseException:
        try:
            return self.backend.commit(self.db, batch, after)
        except Exception as exc:
            return exc


def _settle(settled: list[tuple[asyncio.Future[CommitOutcome], Any]]) -> None:
    """On an event loop: the outcomes of its appends in a group (an exception, or what was committed)."""
    for future, outcome in settled:
        if future.done():  # its waiter was cancelled
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
