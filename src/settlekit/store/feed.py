"""Event feed repository: the global positions the feed's gap walk needs and one tenant's events below a settled
bound. Which positions are settled is decided with the consumer repository's horizon and observation xid (the
dispatcher's gap rule, see dispatch/feed.py); this module only reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from settlekit.store.database import Database, Tx
from settlekit.store.sql import statements


@dataclass(frozen=True)
class FeedEvent:
    """One event of the feed: its global position, type and envelope JSON exactly as stored."""

    position: int
    type: str
    raw_json: str


class FeedRepository:
    """Reads of the event feed, for one database."""

    def __init__(self, db: Database):
        self.db = db
        self._sql = statements("feed", db.dialect)
        self._by_types: dict[int, str] = {}  # the tenant read by the number of types (0: no filter)

    def positions_after(self, tx: Tx, after: int, limit: int) -> list[int]:
        """Visible positions past `after` (every tenant), in order, at most `limit`."""
        return [int(r[0]) for r in tx.fetchall(self._sql["positions_after"], (after, limit))]

    def tenant_events(
        self, tx: Tx, tenant_id: str, after: int, upto: int, types: Sequence[str], limit: int
    ) -> list[FeedEvent]:
        """The tenant's events in (after, upto], of `types` when given, in position order, at most `limit`."""
        sql = self._by_types.get(len(types))
        if sql is None:
            sql = self._sql["tenant_events"]
            if types:
                sql += f" AND type IN ({','.join('?' for _ in types)})"
            sql = self._by_types[len(types)] = sql + " ORDER BY position LIMIT ?"
        rows = tx.fetchall(sql, (tenant_id, after, upto, *types, limit))
        return [FeedEvent(int(r[0]), r[1], r[2]) for r in rows]

    def tenant_last(self, tx: Tx, tenant_id: str, after: int, upto: int) -> int | None:
        """The position of the tenant's last event in (after, upto], of any type (None without one)."""
        value = tx.scalar(self._sql["tenant_last"], (tenant_id, after, upto))
        return None if value is None else int(value)

    def raw_page(self, tx: Tx, tenant_id: str, after: int, limit: int) -> list[FeedEvent]:
        """A plain page of the tenant's events past `after`, with no settled bound (not commit-safe: for
        measuring the feed against)."""
        rows = tx.fetchall(self._sql["raw_page"], (tenant_id, after, limit))
        return [FeedEvent(int(r[0]), r[1], r[2]) for r in rows]
