"""A destination's circuit breaker: an endpoint that stops answering only hurts itself.

After `threshold` attempts in a row that got no answer (timeouts, refused or reset connections) the circuit opens:
the destination's due deliveries wait, without spending attempts, for the probe interval. Then it is half-open:
one request at a time goes out (the probe). An answer of any status closes the circuit; another attempt without
one opens it again for twice the previous interval, up to `probe_max`. Enabling a destination closes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

from settlekit.events.canonical import iso_millis
from settlekit.store.deliveries import Circuit

CLOSED: Final = "closed"
OPEN: Final = "open"
HALF_OPEN: Final = "half_open"
CircuitState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True)
class CircuitPolicy:
    threshold: int = 5  # attempts in a row without an answer that open the circuit; 0: never opens
    probe: timedelta = timedelta(seconds=30)  # the first open interval
    probe_max: timedelta = timedelta(minutes=30)  # the longest

    def interval(self, opens: int) -> timedelta:
        """The open interval after `opens` earlier opens in a row."""
        return min(self.probe * (2 ** min(opens, 30)), self.probe_max)


def state(circuit: Circuit, now: datetime) -> CircuitState:
    if circuit.open_until is None:
        return CLOSED
    return OPEN if circuit.open_until > now else HALF_OPEN


def after_attempts(circuit: Circuit, answered: Iterable[bool], policy: CircuitPolicy, now: datetime) -> Circuit:
    """The circuit after attempts in the order they ended: True for one that got an answer (any HTTP status),
    False for one that got none (timeout, network error)."""
    for ok in answered:
        if ok:
            circuit = Circuit()
            continue
        failures = circuit.failures + 1
        if policy.threshold and failures >= policy.threshold and state(circuit, now) != OPEN:
            circuit = Circuit(failures, circuit.opens + 1, now + policy.interval(circuit.opens))
        else:
            circuit = Circuit(failures, circuit.opens, circuit.open_until)
    return circuit


def to_json(circuit: Circuit, now: datetime) -> dict[str, object]:
    """The API's view of a circuit."""
    return {"state": state(circuit, now), "consecutiveTimeouts": circuit.failures, "opens": circuit.opens,
            "openUntil": iso_millis(circuit.open_until) if circuit.open_until is not None else None}
