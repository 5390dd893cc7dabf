"""Automatic disabling after a long run of failed attempts (`AutoDisable`): the worker counts each destination's
failed attempts in a row; once there are at least `min_failures` of them and the run began `min_duration` ago or
earlier, the destination is disabled with a reason that says so. Enabling it again clears the streak. (A
destination's statistics show the streak: `application.destinations.tools`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from settlekit.delivery.sender import Outcome
from settlekit.events.canonical import iso_millis
from settlekit.store import delivery_recovery as store
from settlekit.store.db import Tx

AUTO_DISABLED: Final = "failing"
"""The first word of an automatic disable's reason."""


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else iso_millis(dt)


@dataclass(frozen=True)
class AutoDisable:
    """Disable a destination after at least `min_failures` failed attempts in a row over at least
    `min_duration`; `min_failures` 0 never disables."""

    min_failures: int = 0
    min_duration: timedelta = timedelta(hours=120)

    @property
    def enabled(self) -> bool:
        return self.min_failures > 0


@dataclass
class _Run:
    reset: bool = False
    failures: int = 0
    first_failure: datetime | None = None
    last_error: str | None = None


def record_outcomes(tx: Tx, outcomes: Sequence[tuple[str, str, Outcome]], rule: AutoDisable,
                    now: datetime) -> list[tuple[str, str, str]]:
    """Count a batch's attempts, `(tenant_id, destination_id, outcome)` in send order, into each destination's
    failure streak and disable those the rule catches; returns (tenant_id, destination_id, reason) of each
    destination disabled now."""
    runs: dict[tuple[str, str], _Run] = {}
    for tenant_id, destination_id, out in outcomes:
        run = runs.setdefault((tenant_id, destination_id), _Run())
        if out.ok:
            run.reset, run.failures, run.first_failure = True, 0, None
        else:
            run.failures += 1
            run.first_failure = run.first_failure or out.started_at
            run.last_error = f"HTTP {out.status}" if out.error is None else out.error
    disabled = []
    for (tenant_id, destination_id), run in sorted(runs.items()):  # row locks in one order (lock_destinations)
        store.update_streak(tx, tenant_id, destination_id, reset=run.reset, failures=run.failures,
                            first_failure=run.first_failure)
        if rule.enabled and run.failures:
            failures, since = store.streak(tx, tenant_id, destination_id)
            reason = (f"{AUTO_DISABLED}: {failures} failed attempts in a row since {_iso(since)} "
                      f"(last: {run.last_error})")
            if store.disable_if_failing(tx, tenant_id, destination_id, min_failures=rule.min_failures,
                                        failing_before=now - rule.min_duration, reason=reason[:200], now=now):
                disabled.append((tenant_id, destination_id, reason))
    return disabled
