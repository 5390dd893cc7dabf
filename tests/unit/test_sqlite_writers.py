"""SQLite writers of one database file wait their turn: threads of a process on a lock, processes on the file's
advisory writer lock; a turn that does not come within the busy timeout is DatabaseUnavailableError."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from settlekit.errors import DatabaseUnavailableError
from settlekit.store.db import connect


def _table(url: str) -> None:
    db = connect(url)
    with db.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS marks (writer TEXT, n INTEGER)")
    db.close()


def _write_marks(url: str, writer: str, count: int) -> None:
    db = connect(url)
    try:
        for n in range(count):
            with db.transaction() as tx:
                tx.execute("INSERT INTO marks (writer, n) VALUES (?, ?)", (writer, n))
    finally:
        db.close()


def _hold_turn(url: str, held: Any, release: Any) -> None:
    db = connect(url)
    with db.transaction() as tx:
        tx.execute("INSERT INTO marks (writer, n) VALUES ('holder', 0)")
        held.set()
        release.wait(30)
    db.close()


def test_writers_of_several_threads_and_processes_all_commit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    _table(url)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_write_marks, args=(url, f"p{i}", 40)) for i in range(2)]
    threads = [threading.Thread(target=_write_marks, args=(url, f"t{i}", 40)) for i in range(3)]
    for worker in (*procs, *threads):
        worker.start()
    for t in threads:
        t.join(60)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = connect(url)
    with db.read() as tx:
        rows = tx.fetchall("SELECT writer, COUNT(*) FROM marks GROUP BY writer ORDER BY writer")
    db.close()
    assert rows == [("p0", 40), ("p1", 40), ("t0", 40), ("t1", 40), ("t2", 40)]


def test_a_writer_whose_turn_does_not_come_is_unavailable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    _table(url)
    ctx = mp.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_turn, args=(url, held, release))
    holder.start()
    try:
        assert held.wait(30)
        db = connect(url, busy_timeout_ms=200)
        with pytest.raises(DatabaseUnavailableError), db.transaction() as tx:
            tx.execute("INSERT INTO marks (writer, n) VALUES ('late', 0)")
        release.set()
        holder.join(30)
        with db.transaction() as tx:  # the turn comes once the holder is done
            tx.execute("INSERT INTO marks (writer, n) VALUES ('late', 1)")
        with db.read() as tx:
            assert tx.fetchall("SELECT writer, n FROM marks ORDER BY writer") == [("holder", 0), ("late", 1)]
        db.close()
    finally:
        release.set()
        holder.join(30)


def test_without_a_usable_lock_file_writers_still_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock file that cannot be opened (a read-only directory, another user's file) leaves the waiting to
    SQLite's busy handler."""
    real_open = os.open

    def refuse_lock_file(path: Any, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith("-writer"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refuse_lock_file)
    url = f"sqlite:///{tmp_path / 'w.db'}"
    _table(url)
    _write_marks(url, "t", 3)
    db = connect(url)
    with db.read() as tx:
        assert tx.scalar("SELECT COUNT(*) FROM marks") == 3
    db.close()


def test_closing_every_database_of_a_file_releases_its_lock_file(tmp_path: Path) -> None:
    from settlekit.store.sqlite import backend

    url = f"sqlite:///{tmp_path / 'w.db'}"
    _table(url)
    first, second = connect(url), connect(url)
    with first.transaction() as tx:
        tx.execute("INSERT INTO marks (writer, n) VALUES ('a', 0)")
    key = os.path.abspath(tmp_path / "w.db")
    assert backend._writer_queues[key].users == 2
    first.close()
    assert backend._writer_queues[key].users == 1
    second.close()
    assert key not in backend._writer_queues


HANG_GUARD = 60.0


class _TurnClock:
    """The writer queue's clock: the turn starts at 0 and comes when `spent` seconds of the timeout are gone."""

    def __init__(self, spent: float):
        self.spent = spent
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return 0.0 if self.calls == 1 else self.spent


@pytest.mark.parametrize("left_ms", [0, 200])
def test_the_busy_handler_waits_only_what_the_turn_left_of_the_timeout(tmp_path: Path, left_ms: int,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer whose turn took all but `left_ms` of an hour-long timeout, behind another program's write lock
    (one that does not queue on the lock file), waits at most `left_ms` more in SQLite's busy handler, not the
    hour again: DatabaseUnavailableError, and the next transaction waits with the whole timeout again."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    _table(url)
    timeout_ms = 3_600_000
    db = connect(url, busy_timeout_ms=timeout_ms)
    other = sqlite3.connect(str(tmp_path / "w.db"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    outcome: list[BaseException | None] = []
    released = threading.Event()
    afterwards: list[int] = []

    def write() -> None:
        try:
            with db.transaction() as tx:
                tx.execute("INSERT INTO marks (writer, n) VALUES ('late', 0)")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
        assert released.wait(HANG_GUARD)
        with db.transaction() as tx:  # the same thread, so the same connection
            afterwards.append(tx.scalar("PRAGMA busy_timeout"))
            tx.execute("INSERT INTO marks (writer, n) VALUES ('late', 1)")

    writer = threading.Thread(target=write)
    try:
        monkeypatch.setattr(db._writers, "clock", _TurnClock((timeout_ms - left_ms) / 1000))  # type: ignore[attr-defined]
        writer.start()
        deadline = time.monotonic() + HANG_GUARD
        while not outcome:
            assert time.monotonic() < deadline, "hang guard: the writer waited the whole timeout again"
            time.sleep(0.01)
        assert isinstance(outcome[0], DatabaseUnavailableError), outcome
        monkeypatch.undo()
        other.execute("ROLLBACK")
        released.set()
        writer.join(HANG_GUARD)
        assert afterwards == [timeout_ms]
        with db.read() as tx:
            assert tx.fetchall("SELECT writer, n FROM marks") == [("late", 1)]
    finally:
        released.set()
        other.close()
        writer.join(HANG_GUARD)
        db.close()
