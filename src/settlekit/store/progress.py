"""How far the background work is behind the event log, for whoever waits for it to catch up (the demo-style
checks of the benchmarks and the multi-process tests): portable statements, all tenants."""

from __future__ import annotations

from dataclasses import dataclass

from settlekit.store.database import Database


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
    """The counts, read in one transaction."""
    with db.read() as tx:
        undelivered = tx.scalar("SELECT count(*) FROM deliveries WHERE state <> 'delivered'")
        artifacts = tx.scalar("SELECT count(*) FROM artifacts")
        consumers = tx.scalar("SELECT count(*) FROM consumer_state")
        behind = tx.scalar("SELECT count(*) FROM consumer_state WHERE last_processed_position <"
                           " (SELECT COALESCE(max(position), 0) FROM events)")
    return Outstanding(int(undelivered), int(artifacts), int(consumers), int(behind))
