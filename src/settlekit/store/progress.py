"""How far the background work is behind the event log, for whoever waits for it to catch up (the demo-style
checks of the benchmarks and the multi-process tests): portable statements, all tenants."""

from __future__ import annotations

from dataclasses import dataclass

from settlekit.store.database import Database
from settlekit.store.sql import statements


@dataclass(frozen=True)
class Outstanding:
    """`undelivered`: deliveries not (yet) delivered; `artifacts`: artifacts built; `consumers`: consumers that
    have registered (a worker that has not started yet has none); `consumers_behind`: consumers that have not
    processed the last committed event."""

    undelivered: int
    artifacts: int
    consumers: int
    consumers_behind: int


def outstanding(db: Database) -> Outstanding:
    """The counts, read in one statement (one snapshot)."""
    with db.read() as tx:
        row = tx.fetchone(statements("progress", tx.dialect)["outstanding"])
    assert row is not None
    undelivered, artifacts, consumers, behind = (int(value) for value in row)
    return Outstanding(undelivered, artifacts, consumers, behind)
