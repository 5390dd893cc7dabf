"""Live-path states of differential-corpus streams, for tests of the server rules and drafts."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import load_differential
from settlekit.errors import SettlekitError
from settlekit.jobs import process_job_events


def state_before(name: str, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The live state just before the stream's event `index`, and that event."""
    events = load_differential(name)["events"]
    state = None
    for event in events[:index]:
        state = process_job_events(state, [event], live=True).state
    assert state is not None
    return state, events[index]


def live_refusal(state: dict[str, Any], event: dict[str, Any]) -> tuple[str, str]:
    """The code and message the live path refuses `event` with on top of `state`."""
    with pytest.raises(SettlekitError) as exc:
        process_job_events(state, [event], live=True)
    return exc.value.code, exc.value.message
