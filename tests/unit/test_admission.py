"""The bounded thread pool of the append route's authentication (api/admission.py): at most `max_pending` calls
held, running or queued; one more is OverloadedError at once, and every way a call ends (returned, raised,
cancelled while queued, refused by a pool that is shut down) gives its place back."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from settlekit.api.admission import BoundedThreadPool
from settlekit.errors import OverloadedError

HANG_GUARD = 60.0


def _pending_once_settled(pool: BoundedThreadPool, expected: int) -> int:
    """`pool.pending` once it reaches `expected` (a finished call gives its place back in a done callback, which may
    run just after its waiter woke), or as it is at the hang guard."""
    deadline = time.monotonic() + HANG_GUARD
    while pool.pending != expected and time.monotonic() < deadline:
        time.sleep(0.001)
    return pool.pending


def test_calls_beyond_the_bound_are_refused_and_every_ending_gives_the_place_back() -> None:
    pool = BoundedThreadPool(1, 3)
    gate = threading.Event()
    try:
        running = pool.submit(gate.wait, HANG_GUARD)
        failing = pool.submit(lambda: 1 / 0)
        cancelled = pool.submit(lambda: "never run")
        assert pool.pending == 3
        with pytest.raises(OverloadedError) as refused:
            pool.submit(lambda: "refused")
        assert refused.value.status == 503 and refused.value.details["limit"] == 3
        assert pool.pending == 3
        assert cancelled.cancel()  # still queued behind the running call
        assert pool.pending == 2
        gate.set()
        assert running.result(HANG_GUARD) is True
        with pytest.raises(ZeroDivisionError):
            failing.result(HANG_GUARD)
        assert _pending_once_settled(pool, 0) == 0
        assert [pool.submit(lambda n=n: n).result(HANG_GUARD) for n in range(5)] == list(range(5))
    finally:
        gate.set()
        pool.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        pool.submit(lambda: "after shutdown")
    assert pool.pending == 0


def test_calls_run_for_an_event_loop_keep_the_bound_and_hand_over_every_outcome() -> None:
    """`run`: the outcome awaited on the loop (a result, the call's exception); beyond the bound OverloadedError at
    once; a call still queued at shutdown(cancel_futures=True) is cancelled; each gives its place back."""
    pool = BoundedThreadPool(1, 3)
    gate = threading.Event()

    async def scenario() -> None:
        running = pool.run(gate.wait, HANG_GUARD)
        failing = pool.run(lambda: 1 / 0)
        queued = pool.run(lambda: "third")
        assert pool.pending == 3
        with pytest.raises(OverloadedError):
            pool.run(lambda: "refused")
        gate.set()
        assert await asyncio.wait_for(running, HANG_GUARD) is True
        with pytest.raises(ZeroDivisionError):
            await asyncio.wait_for(failing, HANG_GUARD)
        assert await asyncio.wait_for(queued, HANG_GUARD) == "third"
        assert pool.pending == 0
        gate.clear()
        started = threading.Event()

        def block() -> bool:
            started.set()
            return gate.wait(HANG_GUARD)

        blocking = pool.run(block)
        never = pool.run(lambda: "never run")
        assert await asyncio.to_thread(started.wait, HANG_GUARD)  # running: shutdown cancels only `never`
        await asyncio.to_thread(pool.shutdown, wait=False, cancel_futures=True)
        gate.set()
        assert await asyncio.wait_for(blocking, HANG_GUARD) is True
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(never, HANG_GUARD)
        with pytest.raises(RuntimeError):
            pool.run(lambda: "after shutdown")

    try:
        asyncio.run(scenario())
    finally:
        gate.set()
        pool.shutdown(wait=True)
    assert pool.pending == 0
