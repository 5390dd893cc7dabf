"""The known-unreachable state of a database (store/reachability.py), on a clock the test moves: a failed
connection attempt makes operations fail at once for the hold, then one caller probes while the others still fail,
and the first success ends the state."""

from __future__ import annotations

import pytest

from settlekit.errors import DatabaseUnavailableError
from settlekit.store.reachability import FAST_FAILURE_CAUSE, Reachability


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _refused(call: object) -> DatabaseUnavailableError:
    with pytest.raises(DatabaseUnavailableError) as refused:
        call()  # type: ignore[operator]
    return refused.value


def test_reachable_until_a_connection_attempt_fails() -> None:
    state = Reachability(1.0, clock=Clock())
    state.check()
    assert state.admit() is False and not state.known_unreachable
    state.reached()
    assert state.admit() is False


def test_a_failed_attempt_fails_everything_at_once_for_the_hold_then_one_caller_probes() -> None:
    clock = Clock()
    state = Reachability(2.0, probe_allowance=5.0, clock=clock)
    state.failed()
    assert state.known_unreachable
    for call in (state.check, state.admit):
        refused = _refused(call)
        assert refused.code == "DATABASE_UNAVAILABLE" and refused.status == 503
        assert refused.details == {"retryAfterSeconds": 2, "cause": FAST_FAILURE_CAUSE}
    clock.now += 1.5
    assert _refused(state.admit).details["retryAfterSeconds"] == 1
    clock.now += 0.5
    state.check()  # asking does not take the probe
    assert state.admit() is True  # the probe
    assert _refused(state.admit).details["retryAfterSeconds"] == 2  # never more than the hold
    _refused(state.check)
    state.failed()  # the probe failed: a new hold
    clock.now += 1.9
    _refused(state.admit)
    clock.now += 0.1
    assert state.admit() is True
    state.reached()  # the probe reached the server
    assert not state.known_unreachable
    assert state.admit() is False and state.admit() is False


def test_a_probe_that_does_not_return_no_longer_holds_the_others_back() -> None:
    clock = Clock()
    state = Reachability(1.0, probe_allowance=3.0, clock=clock)
    state.failed()
    clock.now += 1.0
    assert state.admit() is True
    clock.now += 2.9
    _refused(state.admit)
    clock.now += 0.1
    assert state.admit() is True  # a second probe


def test_no_hold_means_never_failing_fast() -> None:
    state = Reachability(0.0, clock=Clock())
    state.failed()
    state.check()
    assert state.admit() is False and not state.known_unreachable


def test_a_probe_that_ends_without_a_verdict_lets_the_next_caller_probe_at_once() -> None:
    clock = Clock()
    state = Reachability(1.0, probe_allowance=5.0, clock=clock)
    state.failed()
    clock.now += 1.0
    assert state.admit() is True
    state.probe_ended()  # its operation raised an error of its own
    assert state.admit() is True and state.known_unreachable  # the next caller probes without waiting
    state.failed()  # a connection attempt failed meanwhile: its hold stands
    state.probe_ended()
    _refused(state.admit)
    clock.now += 1.0
    assert state.admit() is True
