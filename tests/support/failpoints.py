"""Arming the package's failpoints (`settlekit.failpoints`) from tests.

`crash_at` makes a point raise `SimulatedCrash`; `on_worker` routes the delivery points of one worker to a
callback `(short_name) -> None`; `reset` (run after every test by conftest) disarms everything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from settlekit.failpoints import POINTS, arm, disarm_all

__all__ = ["POINTS", "SimulatedCrash", "arm", "crash_at", "on_worker", "reset"]

DELIVERY_POINTS = tuple(p for p in POINTS if p.startswith("delivery."))

_worker_hooks: dict[str, Callable[[str], None]] = {}


class SimulatedCrash(BaseException):  # noqa: N818 - it is a crash, not an error
    """Stops the code at a failpoint as abruptly as a killed process: a BaseException, so no run loop treats it
    as a recoverable error and nothing is cleaned up; the dispatcher's thread ends with it as `last_error`."""


def crash_at(point: str, *, subject: str | None = None, times: int = 1) -> None:
    """Raise SimulatedCrash at `point` the next `times` times (only where its first argument, the consumer name
    or worker id, is `subject`, when given)."""
    left = [times]

    def hook(*args: Any) -> None:
        if (subject is None or (args and args[0] == subject)) and left[0] > 0:
            left[0] -= 1
            raise SimulatedCrash(f"failpoint {point} ({args[0] if args else ''})")

    arm(point, hook)


def on_worker(worker_id: str, hook: Callable[[str], None]) -> None:
    """Call `hook(name)` at each delivery point a pass of worker `worker_id` reaches (`claimed`, `sending`, `sent`,
    `completing`, `completed`); other workers pass untouched."""
    _worker_hooks[worker_id] = hook
    for point in DELIVERY_POINTS:
        arm(point, _route(point.removeprefix("delivery.")))


def _route(name: str) -> Callable[[str], None]:
    def hook(worker_id: str) -> None:
        found = _worker_hooks.get(worker_id)
        if found is not None:
            found(name)

    return hook


def reset() -> None:
    _worker_hooks.clear()
    disarm_all()
