"""The dispatcher through a database outage (PostgreSQL behind a loopback TCP proxy that is cut and restored; the
shared server never stops): failed passes are retried with exponential backoff and jitter, the log has one line
when the outage starts (no traceback for DATABASE_UNAVAILABLE), one every 30 s while it lasts and one when the
database is back, and the events appended meanwhile are processed once it is. Waits are hang guards only."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from settlekit.append import Appender
from settlekit.dispatch import Consumer, ConsumerContext, Dispatcher
from settlekit.dispatch.outage import OutageBackoff
from settlekit.errors import DatabaseUnavailableError
from settlekit.store.db import Database, connect
from support.tcp_proxy import TcpProxy

HANG_GUARD = 60.0
ACTOR = {"type": "system", "id": "test"}


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.02)


def _append(db: Database, stream: str) -> None:
    store = Appender(db)
    head = store.streams.head("t1", stream)
    store.append("t1", stream, [{"type": "T", "actor": ACTOR, "payload": {}}], expected_version=head.seq if head else 0)


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[TcpProxy, Database, Database]]:
    """(the proxy, the database through it, the database directly)."""
    host = pg_url.split("@", 1)[1].split("/", 1)[0]
    hostname, _, port = host.partition(":")
    proxy = TcpProxy(hostname, int(port or 5432))
    direct = connect(pg_url)
    through = connect(pg_url.replace(f"@{host}/", f"@127.0.0.1:{proxy.port}/"), unavailable_hold=0.05)
    try:
        yield proxy, through, direct
    finally:
        proxy.close()
        through.close()
        direct.close()


class _Spy(OutageBackoff):
    """An OutageBackoff that records the waits it asked for."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.waits: list[float] = []

    def failed(self, exc: BaseException) -> float:
        wait = super().failed(exc)
        self.waits.append(wait)
        return wait


def test_an_outage_is_three_log_lines_and_the_retries_back_off(
        proxied: tuple[TcpProxy, Database, Database], caplog: pytest.LogCaptureFixture) -> None:
    proxy, through, direct = proxied
    seen: list[int] = []

    def handler(ctx: ConsumerContext, event: Any) -> None:
        seen.append(event.position)

    log = logging.getLogger("test.dispatch.outage")
    dispatcher = Dispatcher(through, [Consumer("outage", handler)], registry=CollectorRegistry(), logger=log,
                            poll_interval=0.02)
    dispatcher.pass_outage = _Spy(log, "dispatcher pass", base=0.05, cap=0.4, remind=30.0)
    dispatcher.listen_outage = _Spy(log, "dispatcher LISTEN session", base=0.05, cap=0.4, remind=30.0)
    _append(direct, "s1")
    with caplog.at_level(logging.INFO, logger="test.dispatch.outage"):
        dispatcher.start()
        try:
            _until(lambda: len(seen) == 1, "the first event")
            proxy.cut()
            _append(direct, "s1")  # appended while the dispatcher cannot reach the database
            _until(lambda: dispatcher.pass_outage.failures >= 8, "eight failed passes")
            proxy.restore()
            _until(lambda: len(seen) == 2 and not dispatcher.pass_outage.down, "the event appended meanwhile")
        finally:
            dispatcher.stop()
    waits = dispatcher.pass_outage.waits  # type: ignore[attr-defined]
    # each wait is in the upper half of its step: 0.05, 0.1, 0.2, then the cap 0.4
    for n, wait in enumerate(waits):
        step = min(0.4, 0.05 * 2 ** n)
        assert step / 2 <= wait <= step, (n, waits)
    assert len(set(waits)) > 1  # jittered
    lines = [r for r in caplog.records if r.name == "test.dispatch.outage"]
    passes = [r for r in lines if r.getMessage().startswith("dispatcher pass")]
    assert [r.getMessage().split(";")[0].split(" after")[0] for r in passes] == [
        "dispatcher pass failed", "dispatcher pass works again"]
    assert "DATABASE_UNAVAILABLE" in passes[0].getMessage() and passes[0].exc_info is None
    assert f"({len(waits)} failures)" in passes[1].getMessage()
    assert all(r.exc_info is None for r in lines)  # no traceback for an outage
    assert len(lines) <= 4  # the pass's two lines, and at most the LISTEN session's two


def test_outage_backoff_lines_and_waits() -> None:
    """The state changes of OutageBackoff with a stand-in clock: down, a reminder every `remind` seconds, a
    different error while down (with its traceback: it is not an outage), back."""
    now = [0.0]
    records: list[logging.LogRecord] = []
    log = logging.getLogger("test.outage.unit")
    log.propagate = False
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        outage = OutageBackoff(log, "pass", base=0.2, cap=5.0, remind=30.0, clock=lambda: now[0], jitter=lambda: 1.0)
        down = DatabaseUnavailableError()
        waits = []
        for _ in range(12):
            waits.append(outage.failed(down))
            now[0] += waits[-1]
        assert waits == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]
        now[0] += 10.0
        outage.failed(down)
        outage.failed(RuntimeError("a bug"))
        outage.succeeded()
        outage.succeeded()
    finally:
        log.removeHandler(handler)
    messages = [(r.levelname, r.getMessage().split(":")[0], r.exc_info is not None) for r in records]
    assert messages == [
        ("WARNING", "pass failed; retrying with backoff", False),  # at 0 s
        ("WARNING", "pass still failing after 31 s (11 failures)", False),  # the 12th and 13th: no line
        ("ERROR", "pass failed again, another way; still retrying", True),
        ("INFO", "pass works again after 51.2 s (14 failures)", False),  # once
    ]
